package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"gopkg.in/yaml.v3"
)

// Kong Manager's plugin form, in a real browser. Kong Manager OSS (the UI Kong ships since 3.4)
// builds its plugin form with the PluginForm component of the npm package
// @kong-ui-public/entities-plugins, from the schema Kong serves at GET /schemas/plugins/{name}.
// These tests mount that component, at the versions pinned in testdata/kongmanager's
// package-lock.json (installed by build/kongmanager.sh, bundled with vite), on a minimal
// page, configured as Kong Manager configures it (src/pages/plugins/Form.vue: app kongManager,
// the default workspace). The page talks to adminAPI, a stand-in of Kong's Admin API that serves
// the plugin's dumped schema as Kong shapes it and validates what the form posts with the
// validator of Kong's schema semantics of property_test.go. Headless Chromium (Debian's
// chromium) runs the page, driven over the DevTools protocol by chromedp.
//
// Nothing is skipped: without node, npm or chromium the tests fail (make deps installs them).

// kongManagerPage returns the directory of the built test page: vite's bundle of
// testdata/kongmanager with the npm packages build/kongmanager.sh installed, kept beside them and
// keyed by the page's sources, so it is built once per lockfile and sources.
var kongManagerPage = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("../build/kongmanager.sh").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("build/kongmanager.sh (installs the npm packages): %w", err)
	}
	cache := strings.TrimSpace(string(out))
	sources := []string{"index.html", "main.js", "vite.config.mjs"}
	h := sha256.New()
	for _, name := range sources {
		b, err := os.ReadFile(filepath.Join("testdata", "kongmanager", name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	page := filepath.Join(cache, fmt.Sprintf("page-%x", h.Sum(nil)[:8]))
	if _, err := os.Stat(filepath.Join(page, "index.html")); err == nil {
		return page, nil
	}
	dir, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	for _, name := range sources {
		b, _ := os.ReadFile(filepath.Join("testdata", "kongmanager", name))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Symlink(filepath.Join(cache, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		return "", err
	}
	build := exec.Command("node", "node_modules/vite/bin/vite.js", "build", "--outDir", "dist")
	build.Dir = dir
	build.Env = append(os.Environ(), "VITE_CONFIG_NATIVE_IGNORE_WARNING=true")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("vite build: %w\n%s", err, b)
	}
	if err := os.Rename(filepath.Join(dir, "dist"), page); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(page, "index.html")); serr != nil { // not built by another run meanwhile
			return "", err
		}
	}
	return page, nil
})

// adminAPI is a stand-in of Kong's Admin API: what Kong Manager's plugin form asks of it.
type adminAPI struct {
	t      testing.TB
	schema kongSchema
	served []byte // GET /schemas/plugins/diana

	vmu sync.Mutex // kongValidate writes into the schema's maps

	mu         sync.Mutex
	posts      []map[string]any // the bodies POSTed to /plugins
	stored     []map[string]any // the configs Kong stored (defaults filled), for the accepted posts
	unexpected []string         // other Admin API requests
}

// kongShaped is the body of Kong's GET /schemas/plugins/{name} for the dumped schema: Kong
// answers with api_helpers.schema_to_jsonable of the plugin's subschema (kong/api/routes/
// kong.lua), which keeps the schema's fields and entity_checks and nothing else (not its name);
// the subschema holds the fields the plugin declares (here only config), not the plugins entity's
// own (consumer, route, service, protocols, enabled, instance_name, tags): Kong Manager's form
// adds those itself (scope, protocols, instance name, tags, the enabled switch).
func kongShaped(t testing.TB) []byte {
	t.Helper()
	b, err := dumpInfo("/usr/local/kong/diana.socket")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Plugins []struct{ Schema map[string]json.RawMessage }
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	s := info.Plugins[0].Schema
	out, err := json.Marshal(map[string]json.RawMessage{"fields": s["fields"], "entity_checks": s["entity_checks"]})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newAdminAPI(t testing.TB, page string) (*adminAPI, *httptest.Server) {
	a := &adminAPI{t: t, schema: dumpedSchema(t), served: kongShaped(t)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/schemas/plugins/diana", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.served)
	})
	mux.HandleFunc("POST /api/plugins", a.createPlugin)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.unexpected = append(a.unexpected, r.Method+" "+r.URL.String())
		a.mu.Unlock()
		kongReply(w, http.StatusNotFound, map[string]any{"message": "Not found"})
	})
	mux.Handle("/", http.FileServer(http.Dir(page)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return a, srv
}

// validate is Kong's validation of a plugin config (property_test.go's kongValidate).
func (a *adminAPI) validate(cfg map[string]any) (map[string]any, error) {
	a.vmu.Lock()
	defer a.vmu.Unlock()
	return a.schema.kongValidate(cfg)
}

func kongReply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// createPlugin is POST /plugins: the config goes through Kong's schema rules (defaults filled,
// validated); a refusal is answered as Kong does, a 400 schema violation naming the field.
func (a *adminAPI) createPlugin(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		kongReply(w, http.StatusBadRequest, map[string]any{"message": "Cannot parse JSON body"})
		return
	}
	a.mu.Lock()
	a.posts = append(a.posts, clone(p))
	a.mu.Unlock()
	// protocols: Kong's protocols_http of the dump, its default when absent.
	if p["protocols"] == nil {
		p["protocols"] = toAny(httpProtocols)
	}
	protos, _ := p["protocols"].([]any)
	for i, v := range protos {
		if s, _ := v.(string); !slices.Contains(httpProtocols, s) {
			kongReply(w, http.StatusBadRequest, map[string]any{"code": 2, "name": "schema violation",
				"message": "schema violation (protocols." + strconv.Itoa(i+1) + ": expected one of: " + strings.Join(httpProtocols, ", ") + ")"})
			return
		}
	}
	cfg, _ := p["config"].(map[string]any)
	stored, err := a.validate(cfg)
	if err != nil {
		name, reason, _ := strings.Cut(strings.TrimPrefix(err.Error(), "config."), ": ")
		kongReply(w, http.StatusBadRequest, map[string]any{
			"code": 2, "name": "schema violation",
			"message": fmt.Sprintf("schema violation (config.%s: %s)", name, reason),
			"fields":  map[string]any{"config": map[string]any{name: reason}},
		})
		return
	}
	// What Kong stores the plugin must take: a config Kong accepts and the plugin refuses fails
	// the test (the plugin would let requests through unlimited).
	b, _ := json.Marshal(stored)
	if _, err := parse(b, true); err != nil {
		a.t.Errorf("Kong stores %s, which the plugin refuses: %v", b, err)
	}
	a.mu.Lock()
	a.stored = append(a.stored, stored)
	a.mu.Unlock()
	p["id"], p["config"], p["created_at"] = "5f0c4f1e-9c1b-4d4e-8f8a-000000000001", stored, time.Now().Unix()
	kongReply(w, http.StatusCreated, p)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// clone is a deep copy of a decoded JSON object.
func clone(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var c map[string]any
	json.Unmarshal(b, &c)
	return c
}

// lastPost returns the number of posts and the last one.
func (a *adminAPI) lastPost() (int, map[string]any, map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) == 0 {
		return 0, nil, nil
	}
	var stored map[string]any
	if len(a.stored) > 0 {
		stored = a.stored[len(a.stored)-1]
	}
	return len(a.posts), a.posts[len(a.posts)-1], stored
}

// browser starts headless Chromium for the test.
func browser(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: make deps installs it (Debian package chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// formField is one field of the rendered form, as the operator sees it.
type formField struct {
	ID       string   `json:"id"` // the input's id: config-<name>, or protocols
	Label    string   `json:"label"`
	Help     string   `json:"help"` // the text of the label's info tooltip
	Required bool     `json:"required"`
	Advanced bool     `json:"advanced"`       // under "Show additional settings"
	Kind     string   `json:"kind"`           // select, checkbox, multiselect, array, input
	Type     string   `json:"type,omitempty"` // the input's type (text, number, password)
	Value    string   `json:"value"`
	Checked  bool     `json:"checked,omitempty"`
	Options  []string `json:"options,omitempty"`  // a select's choices
	Selected []string `json:"selected,omitempty"` // a multiselect's chosen items
	Items    int      `json:"items,omitempty"`    // an array's entries
	Errors   string   `json:"errors,omitempty"`   // the field's validation messages
}

// readFormJS reads every field of the form from the DOM.
const readFormJS = `(() => {
  const text = (el) => el ? el.textContent.replace(/\s+/g, ' ').trim() : '';
  const out = [];
  for (const g of document.querySelectorAll('.form-group')) {
    const label = g.querySelector(':scope > label.form-group-label');
    if (!label) continue;
    const id = label.getAttribute('for') || '';
    const f = { id, label: text(label.querySelector('.icon-wrapper span')), help: text(label.querySelector('[role=tooltip]')),
      required: g.classList.contains('required'), advanced: !!g.closest('.nested-collapse'),
      errors: text(g.querySelector('.errors')), options: [], selected: [] };
    const input = document.getElementById(id);
    if (g.classList.contains('field-select')) {
      f.kind = 'select'; f.value = input.value;
      f.options = [...g.querySelectorAll('[role=option] button')].map((b) => b.value);
    } else if (g.classList.contains('field-checkbox')) {
      f.kind = 'checkbox'; f.checked = g.querySelector('input[type=checkbox]').checked;
    } else if (g.classList.contains('field-multiselect')) {
      f.kind = 'multiselect';
      f.selected = [...g.querySelectorAll('[role=option][aria-selected=true], .multiselect-item.selected')].map((o) => text(o));
      f.options = [...g.querySelectorAll('[role=option]')].map((o) => text(o));
    } else if (input && input.tagName === 'INPUT') {
      f.kind = 'input'; f.type = input.type; f.value = input.value;
    } else {
      f.kind = 'array'; f.items = g.querySelectorAll('.kong-form-array-field input').length;
    }
    out.push(f);
  }
  return out;
})()`

// form is the plugin form open in the browser.
type form struct {
	t   *testing.T
	ctx context.Context
	api *adminAPI
	url string
}

// open loads the form afresh, with its additional settings shown.
func (f *form) open() {
	f.t.Helper()
	f.do(chromedp.Navigate(f.url), chromedp.WaitVisible(chromedp.CSS(`#config-limit`)),
		chromedp.Click(chromedp.CSS(`.nested-collapse [data-testid="collapse-trigger-content"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#config-header_name`)))
}

func (f *form) do(steps ...chromedp.Action[chromedp.Void]) {
	f.t.Helper()
	if err := chromedp.Do(f.ctx, steps...); err != nil {
		f.t.Fatal(err)
	}
}

func (f *form) fields() map[string]formField {
	f.t.Helper()
	list, err := chromedp.Run(f.ctx, chromedp.Evaluate[[]formField](readFormJS))
	if err != nil {
		f.t.Fatal(err)
	}
	m := map[string]formField{}
	for _, ff := range list {
		m[ff.ID] = ff
	}
	return m
}

// typeInto replaces the text of config field name by value, as an operator does: select all,
// delete, type.
func (f *form) typeInto(name, value string) {
	f.t.Helper()
	sel := chromedp.ID("config-" + name)
	f.do(chromedp.ScrollIntoView(sel), chromedp.Focus(sel),
		chromedp.Evaluate[chromedp.Void](`document.getElementById(`+jsString("config-"+name)+`).select()`),
		chromedp.KeyEvent("\b"))
	if value != "" {
		f.do(chromedp.SendKeys(sel, value))
	}
	f.do(chromedp.Blur(sel))
}

// choose picks value in the select of config field name.
func (f *form) choose(name, value string) {
	f.t.Helper()
	group := `.form-group:has(#config-` + name + `)`
	f.do(chromedp.ScrollIntoView(chromedp.ID("config-"+name)), chromedp.Click(chromedp.ID("config-"+name)),
		chromedp.Click(chromedp.CSS(group+` [data-testid="select-item-`+value+`"] button`)))
}

// save clicks Save and returns the number of posts the Admin API received and the last.
func (f *form) save() (int, map[string]any, map[string]any) {
	f.t.Helper()
	before, _, _ := f.api.lastPost()
	f.do(chromedp.ScrollIntoView(chromedp.CSS(`[data-testid="plugin-create-form-submit"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="plugin-create-form-submit"]`)))
	// The page records the form's update and error events (main.js): one of them ends a save
	// that reached the Admin API.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		done, err := chromedp.Run(f.ctx, chromedp.Evaluate[bool](`!!(window.__saved || window.__error)`))
		if err != nil {
			f.t.Fatal(err)
		}
		if n, p, s := f.api.lastPost(); done && n > before {
			return n - before, p, s
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, nil, nil
}

// formError is the error the form shows after a save (a client-side validation or the Admin
// API's answer).
func (f *form) formError() string {
	f.t.Helper()
	s, err := chromedp.Run(f.ctx, chromedp.Evaluate[string](
		`[...document.querySelectorAll('.k-alert, [data-testid="form-error"], .form-error')].map((e) => e.textContent.replace(/\s+/g, ' ').trim()).join(' | ')`))
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// kongLabel is the label Kong Manager's form gives a config field: its name, words capitalised.
func kongLabel(name string) string {
	words := strings.Split(name, "_")
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(words, " ")
}

// shown is a schema value as the form's input shows it.
func shown(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

// actionable is what a refusal shows so that an operator can fix the value: a bound, the
// choices, an example, or what is missing.
var actionable = regexp.MustCompile(`between \d+ and \d+|expected one of: |such as |as in |required field missing|expected an integer|length must be at least`)

var updateForm = flag.Bool("update-form", false, "rewrite testdata/kongmanager/form.json from the form the browser shows")

func TestKongManagerForm(t *testing.T) {
	start := time.Now()
	page, err := kongManagerPage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page ready in %v", time.Since(start).Round(time.Millisecond))
	api, srv := newAdminAPI(t, page)
	f := &form{t: t, ctx: browser(t), api: api, url: srv.URL + "/"}
	shots := os.Getenv("DIANA_SCREENSHOTS") // a directory: make kongmanager-screenshots

	t.Run("fields", func(t *testing.T) {
		f.t = t
		f.open()
		got := f.fields()
		for _, sf := range api.schema.fields {
			name, def := sf.name, sf.def
			ff, ok := got["config-"+name]
			if !ok {
				t.Errorf("%s: not in the form", name)
				continue
			}
			if want := kongLabel(name); ff.Label != want {
				t.Errorf("%s: label %q, want %q", name, ff.Label, want)
			}
			// The description is the field's help, shown verbatim (the form renders it as
			// Markdown: a description must not read as Markdown).
			if d, _ := def["description"].(string); d == "" {
				t.Errorf("%s: no description, so no help text in the form", name)
			} else if ff.Help != d {
				t.Errorf("%s: help text %q, want the description %q", name, ff.Help, d)
			}
			if req := def["required"] == true; ff.Required != req {
				t.Errorf("%s: marked required %v, schema required %v", name, ff.Required, req)
			}
			if ff.Advanced == (def["required"] == true) {
				t.Errorf("%s: under additional settings %v, want the required fields in the main section and only the optional ones there", name, ff.Advanced)
			}
			oneOf, _ := def["one_of"].([]any)
			switch {
			case oneOf != nil:
				if ff.Kind != "select" || !reflect.DeepEqual(ff.Options, toStrings(oneOf)) {
					t.Errorf("%s: a %s with choices %v, want a select of %v", name, ff.Kind, ff.Options, oneOf)
				}
				if ff.Value != shown(def["default"]) {
					t.Errorf("%s: shows %q, want the default %v", name, ff.Value, def["default"])
				}
			case def["type"] == "boolean":
				if ff.Kind != "checkbox" || ff.Checked != def["default"] {
					t.Errorf("%s: a %s checked %v, want a checkbox checked as the default %v", name, ff.Kind, ff.Checked, def["default"])
				}
			case def["type"] == "array":
				if ff.Kind != "array" || ff.Items != len(def["default"].([]any)) {
					t.Errorf("%s: a %s of %d entries, want an array of the default %v", name, ff.Kind, ff.Items, def["default"])
				}
			default:
				want := "text"
				if def["type"] == "integer" {
					want = "number"
				} else if def["encrypted"] == true {
					want = "password"
				}
				if ff.Kind != "input" || ff.Type != want {
					t.Errorf("%s: a %s %s, want a %s input", name, ff.Kind, ff.Type, want)
				}
				if def["default"] == nil && ff.Value != "" || def["default"] != nil && ff.Value != shown(def["default"]) {
					t.Errorf("%s: shows %q, want the default %v", name, ff.Value, def["default"])
				}
			}
		}
		// The first screen holds what a per-IP limit needs, as Kong's rate-limiting's form leads
		// with its limits and policy: at most 6 fields, protocols included.
		var first []string
		for _, sf := range api.schema.fields {
			if !got["config-"+sf.name].Advanced {
				first = append(first, sf.name)
			}
		}
		if want := []string{"limit_by", "algorithm", "limit", "window", "policy"}; !reflect.DeepEqual(first, want) {
			t.Errorf("the first screen holds %v and protocols, want %v and protocols", first, want)
		}
		// protocols: Kong's protocols_http, prefilled (without them Kong never runs the plugin).
		if p := got["protocols"]; !reflect.DeepEqual(p.Selected, httpProtocols) || !reflect.DeepEqual(p.Options, httpProtocols) {
			t.Errorf("protocols: %v selected of %v, want %v of %v", p.Selected, p.Options, httpProtocols, httpProtocols)
		}
		// What the operator sees, kept: a change to a label, a help text, a default, a choice
		// or a required mark fails here until form.json is regenerated (-update-form) and reviewed.
		var config []formField
		for _, sf := range api.schema.fields {
			ff := got["config-"+sf.name]
			ff.Errors = ""
			config = append(config, ff)
		}
		b, _ := json.MarshalIndent(config, "", "  ")
		b = append(b, '\n')
		golden := filepath.Join("testdata", "kongmanager", "form.json")
		if *updateForm {
			if err := os.WriteFile(golden, b, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if diff := formDiff(t, golden, config); diff != "" {
			t.Errorf("the form differs from %s (go test ./kongplugin -run TestKongManagerForm -update-form rewrites it; review the diff):\n%s", golden, diff)
		}
		if shots != "" {
			f.screenshot(filepath.Join(shots, "kongmanager-form.png"), `main > h1, .form-group:has(#config-batch_max)`)
		}
	})

	// The validators the form applies before it posts agree with Kong's: the form never keeps
	// back a value Kong accepts, and a value Kong refuses is answered with Kong's error, naming
	// the field, shown by the form.
	t.Run("validators", func(t *testing.T) {
		f.t = t
		cases := []struct{ name, value, choose string }{
			{name: "limit", value: "10"},
			{name: "limit", value: "0"},
			{name: "limit", value: ""},
			{name: "limit", value: "1.5"},
			{name: "window", value: "30s"},
			{name: "window", value: "abc"},
			{name: "window", value: "1m30s"},
			{name: "window", value: ""},
			{name: "error_code", value: "503"},
			{name: "error_code", value: "200"},
			{name: "error_message", value: ""},
			{name: "redis_port", value: "70000"},
			{name: "redis_host", value: "bad host"},
			{name: "path", value: "/a*"},
			{name: "device_header", value: "bad header"},
			{name: "path", value: "/api/**"},
			{name: "path", value: "/api/**/x"},
			{name: "ban", value: "10m"},
			{name: "header_name", choose: "header"}, // limit_by header without header_name
		}
		for _, c := range cases {
			f.open()
			if c.choose != "" {
				f.choose("limit_by", c.choose)
			} else {
				f.typeInto(c.name, c.value)
			}
			n, post, _ := f.save()
			what := fmt.Sprintf("%s %q", c.name, c.value)
			if n == 0 {
				// Kept back by the form: Kong must refuse it too.
				cfg := map[string]any{c.name: c.value}
				if _, err := api.validate(cfg); err == nil {
					t.Errorf("%s: the form refuses it (%s) but Kong accepts it", what, f.formError())
				}
				continue
			}
			_, kongErr := api.validate(post["config"].(map[string]any))
			shownErr := f.formError()
			if kongErr == nil {
				if shownErr != "" {
					t.Errorf("%s: Kong accepts it but the form shows %q", what, shownErr)
				}
				continue
			}
			if !strings.Contains(shownErr, kongErr.Error()) || !strings.Contains(kongErr.Error(), "config."+c.name+": ") {
				t.Errorf("%s: Kong refuses it with %q; the form shows %q", what, kongErr, shownErr)
			}
			// An operator can act on it: it says what the field takes.
			if !actionable.MatchString(kongErr.Error()) {
				t.Errorf("%s: Kong's refusal %q names no bound, choice or example", what, kongErr)
			}
			if shots != "" && c.name == "window" && c.value == "1m30s" {
				f.screenshot(filepath.Join(shots, "kongmanager-error.png"), `.k-alert`)
			}
		}
	})

	// An optional field set and then emptied is sent as null (absent), which Kong accepts, not
	// as "", which Kong refuses (len_min).
	t.Run("clear optional", func(t *testing.T) {
		f.t = t
		for _, name := range []string{"header_name", "path", "redis_sentinel_master"} {
			f.open()
			f.typeInto(name, "X-Api-Key")
			f.typeInto(name, "")
			n, post, stored := f.save()
			if n != 1 || stored == nil {
				t.Errorf("%s: cleared, the config was not saved (%d posts, form shows %q)", name, n, f.formError())
				continue
			}
			if v := post["config"].(map[string]any)[name]; v != nil {
				t.Errorf("%s: cleared, posted as %#v, want null", name, v)
			}
		}
	})

	// The config the form saves, as Kong stores it (defaults filled), limits requests in the
	// real plugin binary, over its socket as Kong drives it: a per-IP limit of 5 per hour entered
	// in the form admits exactly 5 requests per client IP.
	t.Run("per-IP limit end to end", func(t *testing.T) {
		f.t = t
		f.open()
		f.choose("algorithm", "fixed_window")
		f.typeInto("limit", "5")
		f.typeInto("window", "1h")
		if shots != "" {
			f.screenshot(filepath.Join(shots, "kongmanager-per-ip.png"), `.form-group:has(#config-ip_window), .form-group:has(#config-limit_by)`)
			f.do(chromedp.Focus(chromedp.CSS(`.form-group:has(#config-limit_by) .tooltip-trigger-icon`)), chromedp.Sleep(500*time.Millisecond))
			f.screenshot(filepath.Join(shots, "kongmanager-help.png"), `.form-group:has(#config-limit), .form-group:has(#config-limit_by), .form-group:has(#config-limit_by) .k-tooltip`)
			f.do(chromedp.Blur(chromedp.CSS(`.form-group:has(#config-limit_by) .tooltip-trigger-icon`)))
			f.screenshot(filepath.Join(shots, "kongmanager-window.png"), `.form-group:has(#config-warmup), .form-group:has(#config-window), .nested-collapse .collapse-trigger`)
		}
		n, post, stored := f.save()
		if n != 1 || stored == nil {
			t.Fatalf("not saved: %d posts, the form shows %q", n, f.formError())
		}
		protos, _ := post["protocols"].([]any)
		if !slices.ContainsFunc(toStrings(protos), func(p string) bool { return p == "http" || p == "https" }) {
			t.Fatalf("saved with protocols %v: Kong would never run the plugin for HTTP requests", post["protocols"])
		}
		b, _ := json.Marshal(stored)
		if _, err := parse(b, true); err != nil {
			t.Fatalf("Kong stores %s but the plugin refuses it: %v", b, err)
		}
		// The same limit written in kong.yml, as docs/kong.md shows it, is the same config.
		cfgs := dianaConfigs(t, docsKongYML(t))
		if len(cfgs) != 1 {
			t.Fatalf("docs/kong.md's kong.yml has %d diana configs, want 1", len(cfgs))
		}
		for _, cfg := range cfgs {
			fromYML, err := api.validate(clone(cfg))
			if err != nil {
				t.Fatalf("docs/kong.md's kong.yml: Kong refuses it: %v", err)
			}
			if a, b := nonNull(fromYML), nonNull(stored); !reflect.DeepEqual(a, b) {
				t.Errorf("docs/kong.md's kong.yml stores %v, the form %v", a, b)
			}
		}
		s := startServer(t, build(t, "github.com/diana-gw/diana/kongplugin", "diana"))
		id := s.start(stored, "kongmanager-per-ip")
		for _, ip := range []string{"192.0.2.10", "192.0.2.11"} {
			for i := 1; i <= 7; i++ {
				res := s.access(id, &kongReq{IP: ip})
				for _, l := range res.Logs {
					t.Errorf("request %d from %s: the plugin logs %q", i, ip, l)
				}
				if refused := res.Exit && res.Status == 429; refused != (i > 5) {
					t.Fatalf("request %d from %s: exit %v status %d, want %v (limit 5 per IP)", i, ip, res.Exit, res.Status, i > 5)
				}
			}
		}
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.unexpected) > 0 {
		t.Errorf("the form asked the Admin API for what the stand-in does not serve: %v", api.unexpected)
	}
}

// screenshot saves a PNG of the box around every element sel matches.
func (f *form) screenshot(path, sel string) {
	f.t.Helper()
	b, err := chromedp.Run(f.ctx, chromedp.Screenshot(chromedp.CSSAll(sel)))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// docsKongYML returns the kong.yml of docs/kong.md's "From kong.yml" step, decoded.
func docsKongYML(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../docs/kong.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n### From kong.yml\n\n")
	if !ok {
		t.Fatal(`docs/kong.md has no step "From kong.yml"`)
	}
	var block strings.Builder
	for _, l := range strings.Split(after, "\n") {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		block.WriteString(strings.TrimPrefix(l, "    ") + "\n")
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(block.String()), &doc); err != nil {
		t.Fatalf("docs/kong.md's kong.yml: %v", err)
	}
	return doc
}

// nonNull is m without its null values (a field posted as null and one left out are stored
// alike).
func nonNull(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// formDiff compares the form with the one kept in golden, field by field.
func formDiff(t *testing.T, golden string, got []formField) string {
	t.Helper()
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var want []formField
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", golden, err)
	}
	var out strings.Builder
	byID := map[string]formField{}
	for _, w := range want {
		byID[w.ID] = w
	}
	for _, g := range got {
		w, ok := byID[g.ID]
		delete(byID, g.ID)
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		if !ok || string(wb) != string(gb) {
			fmt.Fprintf(&out, "%s:\n  kept:  %s\n  shown: %s\n", g.ID, wb, gb)
		}
	}
	for id := range byID {
		fmt.Fprintf(&out, "%s: kept, no longer shown\n", id)
	}
	return out.String()
}
