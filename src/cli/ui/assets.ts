// The page's script and style sheet, served from its own origin (/ui.js, /ui.css) so that the
// Content-Security-Policy allows no inline code.

/** How often the page asks for fresh counts and, on the list, a fresh table. */
export const STATS_REFRESH_MS = 3_000;

/**
 * The page's one script, every STATS_REFRESH_MS: the live counts from /api/stats and, on the list,
 * the table: the same page fetched again (same filters), parsed inert by DOMParser (no script in
 * it runs), and its #records section put in place of this one. So the table is rendered, and
 * escaped, by the server's one function, as on a reload.
 */
export const SCRIPT = `// idemkit ui: live counts and table
'use strict';
(function () {
  var names = ['inFlight', 'abandoned', 'completed', 'expired', 'bodyBytes'];
  function set(name, text) {
    var el = document.querySelector('[data-stat="' + name + '"]');
    if (el) el.textContent = text;
  }
  function fail(what) {
    return function (e) { set('updated', what + ' unavailable: ' + e.message); document.body.classList.add('stale'); };
  }
  function ok(res) { return res.ok ? res : Promise.reject({ message: 'HTTP ' + res.status }); }
  function refreshCounts() {
    return fetch('/api/stats', { credentials: 'same-origin', cache: 'no-store' })
      .then(ok)
      .then(function (res) { return res.json(); })
      .then(function (s) {
        names.forEach(function (n) { set(n, String(s[n])); });
        set('updated', 'as of ' + s.now.replace('T', ' ').replace(/\\.\\d+Z$/, 'Z'));
        document.body.classList.remove('stale');
      }, fail('counts'));
  }
  function refreshTable() {
    var current = document.getElementById('records');
    if (!current) return;
    fetch(location.pathname + location.search, { credentials: 'same-origin', cache: 'no-store' })
      .then(ok)
      .then(function (res) { return res.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('records');
        var now = document.getElementById('records');
        if (fresh && now) now.replaceWith(document.adoptNode(fresh));
      })
      .catch(fail('table'));
  }
  function refresh() {
    refreshCounts().then(refreshTable);
  }
  refreshCounts();
  setInterval(refresh, ${STATS_REFRESH_MS});
})();
`;

export const STYLE = `:root { color-scheme: light; --fg: #1d232a; --muted: #66707a; --line: #dde2e7; --bg: #f6f8fa; --accent: #2457c5; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: #fff; }
header { display: flex; gap: 12px; align-items: baseline; padding: 10px 20px; background: #1d232a; color: #fff; }
header .brand { color: #fff; font-weight: 700; text-decoration: none; font-size: 16px; }
header .store { color: #c5ced6; font-family: ui-monospace, monospace; font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; min-width: 0; }
header .ro { margin-left: auto; white-space: nowrap; font-size: 12px; color: #9fb1c2; border: 1px solid #4a5561; border-radius: 3px; padding: 0 6px; }
.counts { display: flex; gap: 22px; padding: 10px 20px; background: var(--bg); border-bottom: 1px solid var(--line); align-items: baseline; }
.counts .stat b { font-size: 18px; }
.counts .updated { margin-left: auto; color: var(--muted); font-size: 12px; }
body.stale .counts { background: #fff4e5; }
main { padding: 14px 20px 30px; }
a { color: var(--accent); }
.filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 12px; }
.filters input, .filters select { font: inherit; padding: 2px 4px; }
table.records { border-collapse: collapse; width: 100%; }
table.records th, table.records td { text-align: left; padding: 5px 7px; border-bottom: 1px solid var(--line); white-space: nowrap; }
table.records th { font-size: 12px; color: var(--muted); font-weight: 600; }
table.records td.key, table.records td.scope { font-family: ui-monospace, monospace; max-width: 260px; overflow: hidden; text-overflow: ellipsis; }
td.num { text-align: right; }
table.records th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 9px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; }
.badge.in_flight { background: #fff1c2; color: #6b4e00; }
.badge.completed { background: #d9f2dd; color: #145221; }
.badge.expired { background: #e8eaed; color: #55606b; }
table.detail th, table.headers th { text-align: left; padding: 3px 14px 3px 0; color: var(--muted); font-weight: 600; vertical-align: top; }
table.detail td, table.headers td { padding: 3px 0; }
pre { background: var(--bg); border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 480px; white-space: pre-wrap; word-break: break-all; }
code { font-family: ui-monospace, monospace; }
.hint, .note, .more, .empty { color: var(--muted); }
.error { color: #a11; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 24px; } h3 { font-size: 14px; }
`;