package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lockplane/lockplane/nodes/remote"
)

// TangKeysInputs is a Tang server's key database on its host. The
// signing key's thumbprint is the output clients pin.
type TangKeysInputs struct {
	Connection remote.Target `json:"connection"`
	Dir        string        `json:"dir"`
}

// tangThumbprint prints the thumbprint of the signing key in dir, making
// the keys first if there are none.
func tangThumbprint(dir string, create bool) string {
	make := ""
	if create {
		make = fmt.Sprintf("mkdir -p %[1]s\nls %[1]s/*.jwk >/dev/null 2>&1 || /usr/libexec/tangd-keygen %[1]s\n", remote.Quote(dir))
	}
	return make + fmt.Sprintf(`for k in %s/*.jwk; do
  [ -f "$k" ] || continue
  if jose jwk use -i "$k" -r -u verify 2>/dev/null; then jose jwk thp -i "$k"; exit 0; fi
done
`, remote.Quote(dir))
}

func init() {
	register("TangKeys", spec[TangKeysInputs]{
		Validate: func(in *TangKeysInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			return validatePath("dir", in.Dir)
		},
		Create: func(ctx context.Context, env *Env, in *TangKeysInputs) (string, map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return "", nil, err
			}
			out, err := c.Run(ctx, tangThumbprint(in.Dir, true))
			if err != nil {
				return "", nil, err
			}
			thp := strings.TrimSpace(out)
			if thp == "" {
				return "", nil, fmt.Errorf("%s: no Tang signing key in %s after tangd-keygen", in.Connection.Host, in.Dir)
			}
			return in.Connection.Host + ":" + in.Dir, map[string]any{"thumbprint": thp}, nil
		},
		Read: func(ctx context.Context, env *Env, _ string, in *TangKeysInputs, st map[string]any) (map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return nil, err
			}
			out, err := c.Run(ctx, tangThumbprint(in.Dir, false))
			if err != nil || strings.TrimSpace(out) == "" {
				return nil, err
			}
			st["thumbprint"] = strings.TrimSpace(out)
			return st, nil
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *TangKeysInputs, _ map[string]any) error {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return err
			}
			_, err = c.Run(ctx, "rm -rf "+remote.Quote(in.Dir))
			return err
		},
	})
}

// TangPin is one Tang server a LUKS volume is bound to.
type TangPin struct {
	URL        string `json:"url"`
	Thumbprint string `json:"thumbprint"`
}

// LuksVolumeInputs is a LUKS2 volume (a block device, or an image file on
// hosts without one) whose key is bound with Clevis to Tang servers
// (Shamir, threshold of one: any one server unlocks it).
type LuksVolumeInputs struct {
	Connection remote.Target `json:"connection"`
	Path       string        `json:"path"`
	// SizeMiB makes Path an image file of that size; zero means Path is an
	// existing block device.
	SizeMiB   int       `json:"sizeMiB,omitempty"`
	Tang      []TangPin `json:"tang"`
	Threshold int       `json:"threshold"`
	// MountPoint, for a block device, is where the opened volume is
	// mounted (etcd's data disk), with crypttab and fstab entries so the
	// node unlocks through Tang at boot. Image files cannot be opened
	// without device-mapper and take no mount point.
	MountPoint string `json:"mountPoint,omitempty"`
}

// mapperName is the device-mapper name of an opened volume.
const mapperName = "lockplane-data"

// mountScript opens a bound device through Tang, makes its filesystem
// once, mounts it, and records it for boot (clevis unlocks _netdev
// crypttab entries through Tang; a node that cannot reach Tang stays
// locked, ADR-06).
func (in *LuksVolumeInputs) mountScript() string {
	return fmt.Sprintf(`dev=%[1]s; mp=%[2]s; name=%[3]s
[ -e /dev/mapper/$name ] || clevis luks unlock -d "$dev" -n $name
blkid /dev/mapper/$name >/dev/null 2>&1 || mkfs.ext4 -q -L $name /dev/mapper/$name
mkdir -p "$mp"
mountpoint -q "$mp" || mount -o noatime /dev/mapper/$name "$mp"
grep -q "^$name " /etc/crypttab 2>/dev/null || echo "$name UUID=$(cryptsetup luksUUID "$dev") none _netdev" >> /etc/crypttab
grep -q " $mp " /etc/fstab || echo "/dev/mapper/$name $mp ext4 defaults,noatime,_netdev 0 2" >> /etc/fstab
systemctl enable clevis-luks-askpass.path >/dev/null 2>&1 || true
`, remote.Quote(in.Path), remote.Quote(in.MountPoint), mapperName)
}

func (in *LuksVolumeInputs) unmountScript() string {
	return fmt.Sprintf(`mp=%[1]s; name=%[2]s
mountpoint -q "$mp" && umount "$mp"
[ -e /dev/mapper/$name ] && cryptsetup close $name
sed -i "\# $mp #d" /etc/fstab
sed -i "/^$name /d" /etc/crypttab
`, remote.Quote(in.MountPoint), mapperName)
}

func (in *LuksVolumeInputs) sssConfig() string {
	var pins []map[string]string
	for _, t := range in.Tang {
		pins = append(pins, map[string]string{"url": t.URL, "thp": t.Thumbprint})
	}
	b, _ := json.Marshal(map[string]any{"t": in.Threshold, "pins": map[string]any{"tang": pins}})
	return string(b)
}

// verifyScript proves the volume unlocks through Tang without opening it
// (no device-mapper needed): Clevis recovers the key from a Tang server
// and cryptsetup tests it against the header.
func verifyScript(dev string) string {
	return fmt.Sprintf(`slot=$(clevis luks list -d %[1]s | sed -n 's/^\([0-9]*\): sss.*/\1/p' | head -n 1)
[ -n "$slot" ] || { echo "no clevis sss binding on %[1]s" >&2; exit 3; }
clevis luks pass -d %[1]s -s "$slot" | cryptsetup open --test-passphrase %[1]s --key-file -
echo "$slot $(cryptsetup luksUUID %[1]s)"
`, remote.Quote(dev))
}

func init() {
	register("LuksVolume", spec[LuksVolumeInputs]{
		Validate: func(in *LuksVolumeInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			if err := validatePath("path", in.Path); err != nil {
				return err
			}
			if in.SizeMiB != 0 && in.SizeMiB < 32 {
				return fmt.Errorf("sizeMiB: %d must be 0 (a block device) or at least 32 (LUKS2 needs 16 MiB of header)", in.SizeMiB)
			}
			if len(in.Tang) < 2 {
				return fmt.Errorf("tang: %d servers; a volume binds to at least two, so one Tang outage cannot keep a node locked", len(in.Tang))
			}
			for i, t := range in.Tang {
				if !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
					return fmt.Errorf("tang[%d].url: %q must be an http(s) URL", i, t.URL)
				}
			}
			if in.Threshold < 1 || in.Threshold > len(in.Tang) {
				return fmt.Errorf("threshold: %d must be between 1 and the number of Tang servers (%d)", in.Threshold, len(in.Tang))
			}
			if in.MountPoint != "" {
				if in.SizeMiB > 0 {
					return errors.New("mountPoint: an image file cannot be opened here (no device-mapper); only a block device is mounted")
				}
				return validatePath("mountPoint", in.MountPoint)
			}
			return nil
		},
		Create: func(ctx context.Context, env *Env, in *LuksVolumeInputs) (string, map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return "", nil, err
			}
			dev := remote.Quote(in.Path)
			prepare := fmt.Sprintf("[ -b %s ] || { echo 'not a block device' >&2; exit 3; }\n", dev)
			if in.SizeMiB > 0 {
				prepare = fmt.Sprintf("mkdir -p $(dirname %[1]s)\nrm -f %[1]s\ntruncate -s %[2]dM %[1]s\n", dev, in.SizeMiB)
			}
			// The initial key is random and kept only as the stack's secret
			// recovery key; the Tang binding is how the volume unlocks.
			recovery := randomHex(32)
			script := prepare + fmt.Sprintf(`key=$(mktemp)
trap 'rm -f "$key"' EXIT
printf '%%s' %[2]s > "$key"
cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --iter-time 200 %[1]s "$key"
clevis luks bind -y -k "$key" -d %[1]s sss %[3]s
`, dev, remote.Quote(recovery), remote.Quote(in.sssConfig())) + verifyScript(in.Path)
			if in.MountPoint != "" {
				script += in.mountScript()
			}
			out, err := c.Run(ctx, script)
			if err != nil {
				return "", nil, fmt.Errorf("LUKS volume %s on %s: %w", in.Path, in.Connection.Host, err)
			}
			var slot int
			var uuid string
			if _, err := fmt.Sscanf(strings.TrimSpace(out), "%d %s", &slot, &uuid); err != nil {
				return "", nil, fmt.Errorf("LUKS volume %s on %s: unexpected verification output %q", in.Path, in.Connection.Host, out)
			}
			return uuid, map[string]any{"uuid": uuid, "clevisSlot": slot, "recoveryKey": recovery, "verified": true}, nil
		},
		// Read proves the unlock through Tang again: a volume whose Tang
		// servers are all gone, or whose binding was removed, reads back
		// with verified false.
		Read: func(ctx context.Context, env *Env, _ string, in *LuksVolumeInputs, st map[string]any) (map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return nil, err
			}
			out, err := c.Run(ctx, fmt.Sprintf("cryptsetup isLuks %[1]s && cryptsetup luksUUID %[1]s || true", remote.Quote(in.Path)))
			if err != nil || strings.TrimSpace(out) == "" {
				return nil, err
			}
			_, verr := c.Run(ctx, verifyScript(in.Path))
			st["verified"] = verr == nil
			return st, nil
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *LuksVolumeInputs, _ map[string]any) error {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return err
			}
			if in.SizeMiB > 0 {
				_, err = c.Run(ctx, "rm -f "+remote.Quote(in.Path))
				return err
			}
			// A device keeps its bytes, but without key slots they are noise.
			script := "cryptsetup erase --batch-mode " + remote.Quote(in.Path)
			if in.MountPoint != "" {
				script = in.unmountScript() + script
			}
			_, err = c.Run(ctx, script)
			return err
		},
		Secrets: []string{"recoveryKey"},
	})
}
