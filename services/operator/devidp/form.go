package devidp

import (
	"crypto/subtle"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/pquerna/otp/totp"
)

// deviceForm is the page behind the verification URI: the user enters the
// user code, name, password and optionally the TOTP code, and allows or
// denies the device. GET shows it; POST decides.
type deviceForm struct{ store *storage }

var formPage = template.Must(template.New("form").Parse(`<!doctype html>
<html><head><title>Lockplane dev sign-in</title></head><body>
<h1>Sign in to allow a device</h1>
{{if .Error}}<p role="alert" id="error">{{.Error}}</p>{{end}}
{{if .ClientID}}<p>Client <b>{{.ClientID}}</b> asks for: {{range .Scopes}}{{.}} {{end}}</p>{{end}}
<form method="post" action="/device">
<label>Code <input name="user_code" value="{{.UserCode}}"></label>
<label>User <input name="username" autocomplete="username"></label>
<label>Password <input name="password" type="password"></label>
<label>One-time code <input name="otp" inputmode="numeric" autocomplete="one-time-code"></label>
<button name="action" value="allow">Allow</button>
<button name="action" value="deny">Deny</button>
</form></body></html>
`))

var donePage = template.Must(template.New("done").Parse(`<!doctype html>
<html><body><p id="result">{{.}}</p></body></html>
`))

type formData struct {
	UserCode, ClientID, Error string
	Scopes                    []string
}

func (f *deviceForm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet:
		code := r.URL.Query().Get("user_code")
		d := formData{UserCode: code}
		status := http.StatusOK
		if code != "" {
			var err error
			if d.ClientID, d.Scopes, err = f.store.pendingDevice(code); err != nil {
				d.Error, status = err.Error(), http.StatusNotFound
			}
		}
		render(w, status, formPage, d)
	case http.MethodPost:
		f.post(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (f *deviceForm) post(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<14)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	code := r.PostForm.Get("user_code")
	fail := func(status int, msg string) {
		render(w, status, formPage, formData{UserCode: code, Error: msg})
	}
	if _, _, err := f.store.pendingDevice(code); err != nil {
		fail(http.StatusNotFound, err.Error())
		return
	}
	u := f.store.users[r.PostForm.Get("username")]
	// Compare the password even for an unknown user, so timing does not
	// tell which names exist.
	want := "\x00no user"
	if u != nil {
		want = u.Password
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(r.PostForm.Get("password"))) != 1 || u == nil {
		fail(http.StatusUnauthorized, "wrong user name or password")
		return
	}
	amr := AMRPassword
	if otp := r.PostForm.Get("otp"); otp != "" {
		if !totp.Validate(otp, u.TOTPSecret) {
			fail(http.StatusUnauthorized, "wrong one-time code")
			return
		}
		amr = AMRPasswordOTP
	}
	allow := r.PostForm.Get("action") == "allow"
	if !allow && r.PostForm.Get("action") != "deny" {
		fail(http.StatusBadRequest, `action must be "allow" or "deny"`)
		return
	}
	if err := f.store.completeDevice(code, u.Subject, slices.Clone(amr), allow); err != nil {
		fail(http.StatusNotFound, err.Error())
		return
	}
	msg := "Device denied."
	if allow {
		msg = "Device allowed at " + time.Now().UTC().Format(time.RFC3339) + ". You can close this page."
	}
	render(w, http.StatusOK, donePage, msg)
}

func render(w http.ResponseWriter, status int, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = t.Execute(w, data)
}
