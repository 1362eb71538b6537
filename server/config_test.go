package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/internal/costtest"
	"github.com/diana-gw/diana/store/memstore"
)

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		remote bool
		want   string
	}{
		{"nothing served", "version: 1\nlisten: \"\"\nadmin: {listen: \"\"}\n", false,
			"cfg.yaml: listen: cannot be empty when admin.listen is empty too"},
		{"remote holds server settings", "version: 1\nlisten: \":1\"\nrules: []\n", true,
			"cfg.yaml: listen: unknown field"},
		{"remote redis key without redis", "version: 1\nremote: {redis_key: k}\n", false,
			"cfg.yaml: remote.redis_key: needs the redis section"},
		{"bad upstream url", "version: 1\nupstreams: [{name: a, url: \"ftp://x\"}]\n", false,
			"cfg.yaml: upstreams[0].url: scheme must be http, https or demo"},
		{"newer version", "version: 2\n", false, "cfg.yaml: version:"},
	}
	for _, tt := range tests {
		doc, err := config.Decode([]byte(tt.doc), "cfg.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, err = Decode(doc, "cfg.yaml", tt.remote)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

// Secrets come from the config, a file (Docker and Kubernetes secrets) or the environment, and
// never appear in an error.
func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv("DIANA_REDIS_PASSWORD", "from-env")
	t.Setenv("DIANA_ADMIN_TOKEN", "token-from-env")
	for _, c := range []struct {
		redis, admin    string
		password, token string
	}{
		{`{addrs: "127.0.0.1:6379", password: written}`, `{token: t1}`, "written", "t1"},
		{`{addrs: "127.0.0.1:6379", password_file: "` + file + `"}`, `{token_file: "` + file + `"}`, "from-file", "from-file"},
		{`{addrs: "127.0.0.1:6379"}`, `{}`, "from-env", "token-from-env"},
	} {
		cfg, err := Parse([]byte("version: 1\nredis: "+c.redis+"\nadmin: "+c.admin+"\n"), "c.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Redis.Password != c.password || cfg.Admin.Token != c.token {
			t.Errorf("redis %s, admin %s: password %q, token %q; want %q, %q", c.redis, c.admin, cfg.Redis.Password, cfg.Admin.Token, c.password, c.token)
		}
	}
	for doc, want := range map[string]string{
		`{addrs: "127.0.0.1:6379", password: sekrit, password_file: "` + file + `"}`:     "redis.password_file: cannot be set with password",
		`{addrs: "127.0.0.1:6379", password_file: "` + filepath.Join(dir, "none") + `"}`: "redis.password_file: cannot be read",
		`{addrs: "127.0.0.1:6379", password_file: "` + empty + `"}`:                      "redis.password_file: is empty",
	} {
		_, err := Parse([]byte("version: 1\nredis: "+doc+"\nrules: [{name: a, limit: {algorithm: nope}}]\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "sekrit") || strings.Contains(err.Error(), "from-file")) {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}

// Hostile configs cost bounded time and memory and are refused with the field: the harness
// measures the bytes that parsing allocates, and fails the test instead of hanging if a read
// blocks (a FIFO) or never ends (/dev/zero).
func TestHostileConfigs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, bytes.Repeat([]byte("x"), 64<<10+1), 0o600)
	// One 1 MB string aliased 500 times: each error quoted it, 2.1 GB and 20 s in all, before
	// aliases were bounded by the text they add.
	strBomb := "version: 1\ns: &s " + strings.Repeat("x", 1<<20) + "\nrules: [" + strings.Repeat("*s, ", 499) + "*s]\n"
	for _, c := range []struct {
		name, doc, want string
	}{
		{"aliased string", strBomb, "bytes of keys and strings"},
		{"password_file /dev/zero", "version: 1\nredis: {addrs: 'r:6379', password_file: /dev/zero}\n",
			"redis.password_file: cannot be read: /dev/zero: not a regular file"},
		{"password_file FIFO", "version: 1\nredis: {addrs: 'r:6379', password_file: '" + fifo + "'}\n",
			"redis.password_file: cannot be read: " + fifo + ": not a regular file"},
		{"token_file too large", "version: 1\nadmin: {token_file: '" + big + "'}\n",
			"admin.token_file: cannot be read: " + big + ": larger than 65536 bytes (64 KiB)"},
		{"tls_ca_file /dev/zero", "version: 1\nredis: {addrs: 'r:6379', tls: true, tls_ca_file: /dev/zero}\n",
			"redis.tls_ca_file: cannot be read: /dev/zero: not a regular file"},
		{"tls_key_file FIFO", "version: 1\nredis: {addrs: 'r:6379', tls: true, tls_cert_file: ../schema/testdata/client.pem, tls_key_file: '" + fifo + "'}\n",
			"redis.tls_key_file: cannot be read: " + fifo + ": not a regular file"},
		{"port 99999", "version: 1\nlisten: ':99999'\nredis: {addrs: 'r:99999'}\n", "c.yaml: listen: must be host:port"},
		{"redis port 0", "version: 1\nredis: {addrs: 'r:0'}\n", "c.yaml: redis.addrs: each must be host:port with a port from 1 to 65535"},
	} {
		var err error
		costtest.Check(t, c.name, uint64(100*len(c.doc)+10<<20), time.Minute, func() {
			_, err = Parse([]byte(c.doc), "c.yaml")
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// A client certificate for mutual TLS comes with its key, with tls, and they must be a pair.
func TestClientCertificate(t *testing.T) {
	const redis = "version: 1\nredis: {addrs: 'r:6379', "
	for _, c := range []struct{ name, doc, want string }{
		{"pair", redis + "tls: true, tls_cert_file: ../schema/testdata/client.pem, tls_key_file: ../schema/testdata/client.key}\n", ""},
		{"certificate alone", redis + "tls: true, tls_cert_file: ../schema/testdata/client.pem}\n", "redis.tls_key_file: tls_cert_file and tls_key_file go together"},
		{"key alone", redis + "tls: true, tls_key_file: ../schema/testdata/client.key}\n", "redis.tls_key_file: tls_cert_file and tls_key_file go together"},
		{"without tls", redis + "tls_cert_file: ../schema/testdata/client.pem, tls_key_file: ../schema/testdata/client.key}\n", "redis.tls_cert_file: applies only with tls: true"},
		{"not a pair", redis + "tls: true, tls_cert_file: ../schema/testdata/ca.pem, tls_key_file: ../schema/testdata/client.key}\n", "redis.tls_key_file: is not the key of tls_cert_file's certificate"},
		{"missing file", redis + "tls: true, tls_cert_file: nowhere.pem, tls_key_file: ../schema/testdata/client.key}\n", "redis.tls_cert_file: cannot be read"},
	} {
		cfg, err := Parse([]byte(c.doc), "c.yaml")
		switch {
		case c.want == "" && (err != nil || cfg.Redis.ClientCert == nil || cfg.Redis.ClientKey == nil):
			t.Errorf("%s: %v, want the pair read", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// An admin listener reachable from other hosts needs a token, or an explicit
// admin.allow_unauthenticated; on loopback it needs neither.
func TestAdminNeedsToken(t *testing.T) {
	t.Setenv("DIANA_ADMIN_TOKEN", "")
	const refused = "c.yaml: admin.token: must be set (or token_file, or DIANA_ADMIN_TOKEN) when admin.listen"
	for _, c := range []struct {
		admin, want string
	}{
		{`{listen: ":9090"}`, refused},
		{`{listen: "0.0.0.0:9090"}`, refused},
		{`{listen: "[::]:9090"}`, refused},
		{`{listen: "192.0.2.7:9090"}`, refused},
		{`{listen: "admin.internal:9090"}`, refused},
		{`{listen: ":9090", allow_unauthenticated: false}`, refused},
		{`{listen: ":9090", token: t}`, ""},
		{`{listen: ":9090", token_file: "../schema/testdata/secret"}`, ""},
		{`{listen: ":9090", allow_unauthenticated: true}`, ""},
		{`{listen: "127.0.0.1:9090"}`, ""},
		{`{listen: "127.9.9.9:9090"}`, ""},
		{`{listen: "[::1]:9090"}`, ""},
		{`{listen: "localhost:9090"}`, ""},
		{`{listen: ""}`, ""},
		{`{}`, ""},
	} {
		_, err := Parse([]byte("version: 1\nadmin: "+c.admin+"\n"), "c.yaml")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("admin %s: %v, want it accepted", c.admin, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("admin %s: error %v, want %q", c.admin, err, c.want)
		}
	}
	t.Setenv("DIANA_ADMIN_TOKEN", "from-env")
	if _, err := Parse([]byte("version: 1\nadmin: {listen: \":9090\"}\n"), "c.yaml"); err != nil {
		t.Errorf("token from DIANA_ADMIN_TOKEN: %v", err)
	}
}

// The connection settings of both listeners and the local store's bound: nginx's defaults, the
// values set, and their bounds.
func TestConnectionSettings(t *testing.T) {
	cfg, err := Parse([]byte("version: 1\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nginx := Connections{KeepaliveTimeout: 75 * time.Second, HeaderTimeout: 60 * time.Second, BodyTimeout: 60 * time.Second, SendTimeout: 60 * time.Second}
	if cfg.Connections != nginx || cfg.Admin.Connections != nginx {
		t.Errorf("defaults: proxy %+v, admin %+v; want %+v", cfg.Connections, cfg.Admin.Connections, nginx)
	}
	if cfg.LocalStore.MaxKeys != memstore.DefaultMaxEntries {
		t.Errorf("local_store.max_keys default %d, want %d", cfg.LocalStore.MaxKeys, memstore.DefaultMaxEntries)
	}
	cfg, err = Parse([]byte(`version: 1
connections: {max: 100, keepalive_timeout: 0s, header_timeout: 5s, body_timeout: 6s, send_timeout: 7s}
admin: {connections: {max: 10, keepalive_timeout: 1s}}
local_store: {max_keys: 64}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Connections{Max: 100, HeaderTimeout: 5 * time.Second, BodyTimeout: 6 * time.Second, SendTimeout: 7 * time.Second}
	if cfg.Connections != want || cfg.Admin.Connections.Max != 10 || cfg.Admin.Connections.KeepaliveTimeout != time.Second || cfg.LocalStore.MaxKeys != 64 {
		t.Errorf("set: proxy %+v, admin %+v, max_keys %d", cfg.Connections, cfg.Admin.Connections, cfg.LocalStore.MaxKeys)
	}
	for doc, want := range map[string]string{
		"connections: {max: -1}":               "c.yaml: connections.max: must be between 0 and",
		"connections: {header_timeout: 0s}":    "c.yaml: connections.header_timeout:",
		"admin: {connections: {idle: 1s}}":     "c.yaml: admin.connections.idle: unknown field",
		"local_store: {max_keys: 63}":          "c.yaml: local_store.max_keys: must be between 64 and",
		"local_store: {max_bytes: 1}":          "c.yaml: local_store.max_bytes: unknown field",
		"connections: {send_timeout: forever}": "c.yaml: connections.send_timeout:",
	} {
		_, err := Parse([]byte("version: 1\n"+doc+"\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}
