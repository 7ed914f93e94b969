package pausetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/pgfence"
	"github.com/lockplane/lockplane/services/fence/s3fence"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// PGTable is the table the postgres kind writes: one row per record.
const PGTable = "lockplane_pausetest"

func init() {
	Register(Kind{Name: "postgres", Prepare: PreparePostgres, Open: func(ctx context.Context, target string, dial DialFunc) (Resource, error) {
		conn, err := ConnectPostgres(ctx, target, dial)
		if err != nil {
			return nil, err
		}
		return &pgResource{PGConn{conn}}, nil
	}, Identity: pgIdentity})
	Register(Kind{Name: "s3", Prepare: prepareS3, Open: openS3, Identity: s3Identity})
}

// PreparePostgres creates the records' table with the reference fence
// column.
func PreparePostgres(ctx context.Context, target string) error {
	conn, err := pgx.Connect(ctx, target)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+PGTable+" (id text PRIMARY KEY, value text NOT NULL)"); err != nil {
		return err
	}
	return pgfence.Table{Name: PGTable}.Migrate(ctx, conn)
}

// ConnectPostgres opens one connection through dial.
func ConnectPostgres(ctx context.Context, target string, dial DialFunc) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(target)
	if err != nil {
		return nil, err
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) }
	return pgx.ConnectConfig(ctx, cfg)
}

// PGConn reads records; wrong fences in tests embed it.
type PGConn struct{ Conn *pgx.Conn }

// Read implements Resource.
func (p PGConn) Read(ctx context.Context, record string) (string, error) {
	var v string
	err := p.Conn.QueryRow(ctx, "SELECT value FROM "+PGTable+" WHERE id = $1", record).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// Close implements Resource.
func (p PGConn) Close() error { return p.Conn.Close(context.Background()) }

type pgResource struct{ PGConn }

func (p *pgResource) Write(ctx context.Context, tok token.Token, record, value string) error {
	return pgfence.Table{Name: PGTable}.Insert(ctx, p.Conn, tok, record, pgfence.Col{Name: "value", Value: value})
}

func pgIdentity(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "postgres"
	}
	return "postgres://" + u.Host + u.Path
}

// s3 targets are http://ACCESS:SECRET@host:port/bucket.
func s3Client(target string, dial DialFunc) (*minio.Client, string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, "", err
	}
	pass, _ := u.User.Password()
	bucket := strings.Trim(u.Path, "/")
	if bucket == "" {
		return nil, "", fmt.Errorf("pausetest: s3 target needs a bucket: http://ACCESS:SECRET@host:port/BUCKET")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if dial != nil {
		tr.DialContext = dial
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(u.User.Username(), pass, ""), Secure: u.Scheme == "https", Transport: tr})
	return c, bucket, err
}

func prepareS3(ctx context.Context, target string) error {
	c, bucket, err := s3Client(target, nil)
	if err != nil {
		return err
	}
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil || ok {
		return err
	}
	return c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
}

func openS3(ctx context.Context, target string, dial DialFunc) (Resource, error) {
	c, bucket, err := s3Client(target, dial)
	if err != nil {
		return nil, err
	}
	return S3Store{s3fence.Store{Client: c, Bucket: bucket}}, nil
}

// S3Store is the s3 kind's resource: one object per record.
type S3Store struct{ s3fence.Store }

// Write implements Resource.
func (s S3Store) Write(ctx context.Context, tok token.Token, record, value string) error {
	return s.Put(ctx, tok, record, strings.NewReader(value), int64(len(value)), "text/plain")
}

// Read implements Resource.
func (s S3Store) Read(ctx context.Context, record string) (string, error) {
	b, _, err := s.Get(ctx, record)
	if errors.Is(err, fence.ErrNoRecord) {
		return "", nil
	}
	return string(b), err
}

// Close implements Resource.
func (S3Store) Close() error { return nil }

func s3Identity(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "s3"
	}
	return "s3://" + u.Host + u.Path
}
