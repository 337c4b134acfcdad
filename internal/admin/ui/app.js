// Switchyard dashboard: plain JavaScript over the admin JSON API
// (docs/design/010-dashboard.md). Text from the gateway is only ever set
// as textContent, never parsed as HTML. The admin token lives in this
// tab's sessionStorage and goes out only as a bearer header to this origin.
'use strict';

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const TOKEN_KEY = 'switchyard.admin-token';
const MAX_EVENTS = 1000;

// el builds an element: attrs are properties (or data-/aria- attributes),
// children are nodes or strings (as text).
function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role' || k === 'scope') n.setAttribute(k, v);
    else n[k] = v;
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    n.append(c instanceof Node ? c : String(c));
  }
  return n;
}

function badge(state) { return el('span', { className: 'badge ' + state }, state.replace('_', ' ')); }

function status(msg, isError) {
  const s = $('status');
  s.textContent = msg || '';
  s.classList.toggle('error', !!isError);
}

function fmt(n, digits) {
  if (n === undefined || n === null || Number.isNaN(n)) return '–';
  return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits ?? 1 });
}

function fmtMS(ms) {
  if (ms < 0) return '–';
  if (ms >= 60000) return fmt(ms / 60000, 1) + ' min';
  if (ms >= 1000) return fmt(ms / 1000, 1) + ' s';
  return fmt(ms, 0) + ' ms';
}

function plural(n, noun) { return fmt(n, 0) + ' ' + noun + (n === 1 ? '' : 's'); }

function timeOf(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString();
}

function routeHref(id) { return '#route/' + encodeURIComponent(id); }

// --- the admin token ---------------------------------------------------

const auth = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ''; },
  set(t) { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); showAuth(); },
  readOnly: false, // the gateway has no token configured at all
};

function showAuth() {
  const has = !!auth.token;
  $('auth-state').textContent = auth.readOnly ? 'read-only gateway (no admin.token)' : has ? 'admin token set (this tab)' : 'read-only';
  $('token-forget').hidden = !has;
  $('token-button').hidden = auth.readOnly;
  for (const b of document.querySelectorAll('[data-action]')) b.disabled = auth.readOnly;
}

// askToken opens the token prompt and resolves to whether a token was given.
function askToken() {
  const d = $('token-dialog');
  $('token-input').value = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => {
      const v = $('token-input').value.trim();
      $('token-input').value = '';
      if (d.returnValue === 'ok' && v) { auth.set(v); resolve(true); } else resolve(false);
    }, { once: true });
    d.showModal();
    $('token-input').focus();
  });
}

// post sends an admin request with the token, asking for it first.
async function post(path, body) {
  if (!auth.token && !(await askToken())) return null;
  const r = await fetch(path, {
    method: 'POST',
    headers: { 'Authorization': 'Bearer ' + auth.token, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(40000), // a tried request has 30 s
  });
  if (r.status === 401) {
    auth.set(''); // a wrong token is forgotten, so the next try asks again
    throw new Error('the gateway refused the admin token (401)');
  }
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { msg = (await r.json()).error || msg; } catch { /* no JSON body */ }
    throw new Error(msg);
  }
  return r.status === 204 ? {} : r.json();
}

async function get(path) {
  // Bounded, so that one stuck answer cannot stop the polling for good.
  const r = await fetch(path, { headers: { 'Accept': 'application/json' }, signal: AbortSignal.timeout(15000) });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { msg = (await r.json()).error || msg; } catch { /* no JSON body */ }
    throw new Error(msg);
  }
  return r.json();
}

// --- pages and polling -------------------------------------------------

const pages = {};
let current = null; // {name, arg}
let busy = false;

async function refresh() {
  if (!current || busy || document.hidden) return;
  const p = pages[current.name];
  if (!p || !p.load) return;
  busy = true;
  try {
    await p.load(current.arg);
    if ($('status').classList.contains('error')) status('');
  } catch (e) {
    status('Could not load: ' + e.message, true);
  } finally {
    busy = false;
  }
}

let soon = 0;
function refreshSoon() {
  clearTimeout(soon);
  soon = setTimeout(refresh, 250);
}

function route() {
  const h = decodeURIComponent(location.hash.slice(1));
  let name = h || 'overview', arg = '';
  if (h.startsWith('route/')) { name = 'route'; arg = h.slice(6); }
  if (!pages[name]) name = 'overview';
  current = { name, arg };
  for (const s of document.querySelectorAll('main > section')) s.hidden = s.dataset.page !== name;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === name || (name === 'route' && a.dataset.page === 'routes')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (pages[name].show) pages[name].show(arg);
  refresh();
}

// --- overview ----------------------------------------------------------

function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

// chart draws lines (arrays of numbers, NaN for gaps) on a small canvas.
function chart(canvas, lines, colors, fixedMax) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, h = canvas.clientHeight || 70;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  let maxV = fixedMax || 0;
  if (!fixedMax) for (const l of lines) for (const v of l) if (v > maxV) maxV = v;
  if (!(maxV > 0)) maxV = 1;
  g.strokeStyle = cssVar('--line'); g.lineWidth = 1;
  g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
  lines.forEach((l, i) => {
    g.strokeStyle = colors[i]; g.lineWidth = 1.5; g.beginPath();
    let started = false;
    l.forEach((v, j) => {
      if (Number.isNaN(v)) { started = false; return; }
      // The top 14 px are the scale's label.
      const x = l.length < 2 ? w : (j / (l.length - 1)) * w, y = h - 2 - (v / maxV) * (h - 16);
      if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
    });
    g.stroke();
  });
  g.fillStyle = cssVar('--muted'); g.font = '10px system-ui';
  g.fillText('max ' + fmt(maxV, 2), 2, 10);
}

// alarmItem is the overview's line for an alarm (/api/dash/overview).
function alarmItem(a) {
  const li = el('li', { 'data-alarm': a.kind });
  switch (a.kind) {
    case 'state_degraded':
      li.append('Shared state out of reach, serving from local state: ' + a.detail);
      break;
    case 'proxy_auth': {
      li.append(plural(a.count, 'route') + ' refused by their proxy (407): check their credentials: ');
      a.routes.forEach((id, i) => li.append(i ? ', ' : '', el('a', { href: routeHref(id) }, id)));
      if (a.count > a.routes.length) li.append(', …');
      break;
    }
    case 'local_resources':
      li.append(plural(a.count, 'attempt') + ' not made in the last ' + fmtMS(1000 * a.seconds) +
        ' for want of the gateway\'s own resources (descriptors, ports, server.max_upstream_conns): answered 503 local_resources');
      break;
    case 'restart_required':
      li.append('Restart required to apply: ' + a.sections.join(', '));
      break;
    default:
      li.append(a.kind);
  }
  return li;
}

pages.overview = {
  async load() {
    const o = await get('/api/dash/overview');
    auth.readOnly = o.read_only; showAuth();
    $('ov-routes').textContent = fmt(o.routes, 0);
    const pool = $('ov-pool');
    pool.replaceChildren(...Object.entries(o.pool).filter(([, n]) => n > 0)
      .map(([s, n]) => el('li', { 'data-state': s }, badge(s), ' ', fmt(n, 0))));
    const pts = o.series;
    const last = pts.slice(-5); // the overview's figures: the last ~5 s
    const sum = (i) => last.reduce((a, p) => a + p[i], 0);
    const secs = sum(1), req = sum(2);
    $('ov-rps').textContent = secs > 0 ? fmt(req / secs, 1) : '–';
    $('ov-success').textContent = req > 0 ? fmt(100 * sum(3) / req, 1) + ' %' : '–';
    $('ov-apr').textContent = req > 0 ? fmt(sum(4) / req, 2) : '–';
    const lp = pts.length ? pts[pts.length - 1] : null;
    // Quantiles are their bucket's upper bound; the first bucket holds all
    // under a millisecond.
    const q = (ms) => (ms <= 1 ? '≤ 1 ms' : fmtMS(ms));
    $('ov-latency').textContent = lp && lp[4] > 0 ? q(lp[7]) + ' / ' + q(lp[8]) : '–';
    const accent = cssVar('--accent'), warn = cssVar('--s-cooling');
    chart($('ch-rps'), [pts.map((p) => p[1] > 0 ? p[2] / p[1] : NaN)], [accent]);
    chart($('ch-success'), [pts.map((p) => p[2] > 0 ? p[3] / p[2] : NaN)], [cssVar('--s-healthy')], 1);
    chart($('ch-apr'), [pts.map((p) => p[2] > 0 ? p[4] / p[2] : NaN)], [accent]);
    chart($('ch-latency'), [pts.map((p) => p[4] > 0 ? p[7] : NaN), pts.map((p) => p[4] > 0 ? p[8] : NaN)], [accent, warn]);
    const b = o.budget;
    $('ov-retry').value = Math.min(1, b.retry_use);
    // Each meter is the share of its budget spent (retry.budget_ratio for
    // retries and hedges together, retry.hedge_ratio for hedges).
    $('ov-retry-text').textContent = fmt(100 * b.retry_use, 0) + ' % of budget (' +
      (b.retries === 1 ? '1 retry' : fmt(b.retries, 0) + ' retries') +
      ', ' + plural(b.hedges, 'hedge') + ' / ' + plural(b.requests, 'request') + ')';
    $('ov-hedge').value = Math.min(1, b.hedge_use);
    $('ov-hedge-text').textContent = b.hedge_ratio > 0 ? fmt(100 * b.hedge_use, 0) + ' % of budget' : 'hedging off';
    const st = o.state;
    $('ov-state').textContent = st.degraded ? 'degraded' : st.kind === 'redis' ? 'Redis' : 'memory';
    $('ov-state-detail').textContent = st.degraded ? 'serving from local state: ' + st.degraded
      : st.kind === 'redis' ? 'shared at ' + st.addr : 'this process alone';
    const alarms = o.alarms.map(alarmItem);
    $('ov-alarms').replaceChildren(...(alarms.length ? alarms : [el('li', {}, 'none')]));
    $('ov-alarms-card').classList.toggle('alarm', alarms.length > 0);
    const inc = $('ov-incidents');
    inc.replaceChildren(...(o.incidents.length ? o.incidents.map((i) => el('li', {}, i.target, ' — ', i.class)) : [el('li', {}, 'none')]));
  },
};

// --- routes table (windowed: only the rows in view are in the DOM) -----

const COLS = [
  { key: 'state', label: 'State' }, { key: 'id', label: 'Route' }, { key: 'labels', label: 'Labels' },
  { key: 'tier', label: 'Tier', num: true }, { key: 'score', label: 'Score', num: true }, { key: 'cost_ms', label: 'Est. cost', num: true },
  { key: 'latency_ms', label: 'Latency', num: true }, { key: 'inflight', label: 'In flight', num: true },
  { key: 'attempts', label: 'Attempts', num: true }, { key: 'successes', label: 'Successes', num: true },
  { key: 'last_failure_class', label: 'Last failure' }, { key: 'cause', label: 'State cause' },
  { key: 'cooldown_ms', label: 'Cooldown left', num: true },
];

const table = { rows: [], view: [], states: [], col: {}, sort: 'id', dir: 1, rowH: 29, drawn: '' };

function cellText(r, c) {
  const v = r[table.col[c.key]];
  switch (c.key) {
    case 'score': return fmt(v, 3);
    case 'cost_ms': case 'latency_ms': return v > 0 ? fmtMS(v) : '–';
    case 'cooldown_ms': return v === -1 ? 'until restored' : v > 0 ? fmtMS(v) : '';
    case 'tier': case 'inflight': case 'attempts': case 'successes': return fmt(v, 0);
    default: return v;
  }
}

function buildHead() {
  $('rt-head').replaceChildren(...COLS.map((c) => {
    const th = el('th', { scope: 'col', className: c.num ? 'num' : '' },
      el('button', { type: 'button', onclick: () => sortBy(c.key) }, c.label));
    if (table.sort === c.key) th.setAttribute('aria-sort', table.dir > 0 ? 'ascending' : 'descending');
    return th;
  }));
}

function sortBy(key) {
  table.dir = table.sort === key ? -table.dir : 1;
  table.sort = key;
  buildHead();
  applyView();
}

function applyView() {
  const q = $('rt-filter').value.trim().toLowerCase();
  const want = $('rt-state').value;
  const si = table.col.state, ii = table.col.id, li = table.col.labels, ci = table.col.cause, ui = table.col.url;
  let v = table.rows;
  if (want !== '') v = v.filter((r) => table.states[r[si]] === want);
  if (q) {
    v = v.filter((r) => r[ii].toLowerCase().includes(q) || r[li].toLowerCase().includes(q) ||
      r[ci].includes(q) || r[ui].toLowerCase().includes(q) || table.states[r[si]].includes(q));
  }
  const k = table.col[table.sort], d = table.dir;
  const key = table.sort === 'state' ? (r) => table.states[r[k]] : (r) => r[k];
  v = v.slice().sort((a, b) => {
    const x = key(a), y = key(b);
    return (x < y ? -1 : x > y ? 1 : 0) * d || (a[ii] < b[ii] ? -1 : 1);
  });
  table.view = v;
  $('rt-count').dataset.count = v.length;
  $('rt-count').textContent = v.length === table.rows.length ? plural(v.length, 'route')
    : fmt(v.length, 0) + ' of ' + plural(table.rows.length, 'route');
  table.drawn = '';
  drawRows();
}

function drawRows() {
  const sc = $('rt-scroll');
  const head = 30;
  const first = Math.max(0, Math.floor((sc.scrollTop - head) / table.rowH) - 10);
  const count = Math.ceil(sc.clientHeight / table.rowH) + 20;
  const last = Math.min(table.view.length, first + count);
  const sig = first + ':' + last;
  if (sig === table.drawn) return;
  table.drawn = sig;
  const pad = (rows) => { const tr = el('tr', { 'aria-hidden': 'true' }); tr.style.height = rows * table.rowH + 'px'; return tr; };
  const out = [pad(first)];
  for (let i = first; i < last; i++) {
    const r = table.view[i];
    const id = r[table.col.id];
    const tr = el('tr', { 'data-route': id, 'data-state': table.states[r[table.col.state]] });
    for (const c of COLS) {
      let content;
      if (c.key === 'state') content = badge(table.states[r[table.col.state]]);
      else if (c.key === 'id') content = el('a', { href: routeHref(id), title: r[table.col.url] || id }, id);
      else content = cellText(r, c);
      tr.append(el('td', { className: (c.num ? 'num ' : '') + c.key, title: c.key === 'labels' ? r[table.col.labels] : undefined }, content));
    }
    out.push(tr);
  }
  out.push(pad(table.view.length - last));
  $('rt-body').replaceChildren(...out);
  const probe = $('rt-body').children[1];
  if (probe && probe.offsetHeight > 0 && probe.offsetHeight !== table.rowH) { // measured once, after the CSS applies
    table.rowH = probe.offsetHeight;
    table.drawn = '';
    drawRows();
  }
}

pages.routes = {
  async load() {
    const d = await get('/api/dash/routes');
    table.states = d.states;
    d.columns.forEach((c, i) => { table.col[c] = i; });
    table.rows = d.rows;
    const sel = $('rt-state');
    if (sel.options.length === 1) for (const s of d.states) sel.append(el('option', {}, s));
    applyView();
  },
};

// --- one route ---------------------------------------------------------

function eventItem(e) {
  const li = el('li', { 'data-kind': e.kind, 'data-route': e.route, 'data-target': e.target || '' }, el('time', { dateTime: e.time }, timeOf(e.time)));
  if (e.kind === 'incident') {
    li.append('incident ', e.open ? 'opened' : 'closed', ' on ', e.target, ' (', e.class || 'ok', ') via ', el('a', { href: routeHref(e.route) }, e.route));
  } else if (e.kind === 'tier') {
    li.append(e.target, ' served from cost tier ', String(e.from_tier), ' → ', String(e.to_tier));
  } else {
    li.append(el('a', { href: routeHref(e.route) }, e.route), e.target ? ' × ' + e.target : ' (global)', ' ', badge(e.from), ' → ', badge(e.to), ' on ', e.class || 'ok');
  }
  if (e.reason) li.append(' ', el('span', { className: 'reason' }, '— ' + e.reason));
  if (e.rules) li.append(' ', el('span', { className: 'reason' }, '[rules ' + e.rules + ']'));
  return li;
}

function facts(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

pages.route = {
  show(id) { $('rd-id').textContent = id; $('rd-action-note').textContent = ''; },
  async load(id) {
    const r = await get('/api/routes/' + encodeURIComponent(id));
    const labels = Object.entries(r.labels).map(([k, v]) => k + '=' + v).join(' ');
    facts($('rd-facts'), [
      ['State', badge(r.state)], ['Address', r.url || '–'], ['Labels', labels || '–'], ['Cost tier', String(r.tier)],
      ['Score', fmt(r.score, 3)], ['Est. cost', r.cost_ms > 0 ? fmtMS(r.cost_ms) : '–'],
      ['Success (EWMA)', fmt(r.success_ewma, 3)], ['Latency (peak EWMA)', r.latency_ms_ewma > 0 ? fmtMS(r.latency_ms_ewma) : '–'],
      ['Samples', fmt(r.samples, 0)], ['Consecutive failures', fmt(r.consecutive_failures, 0)],
      ['In flight', fmt(r.inflight, 0)], ['Attempts / successes', fmt(r.attempts, 0) + ' / ' + fmt(r.successes, 0)],
      ['Last success', r.last_success ? timeOf(r.last_success) : 'never'], ['Last failure', r.last_failure ? timeOf(r.last_failure) : 'never'],
      ['Cause', r.cause || '–'], ['Cooldown until', r.cooldown_until ? timeOf(r.cooldown_until) : '–'],
    ]);
    $('rd-targets').replaceChildren(...r.targets.map((t) => el('tr', { 'data-target': t.target },
      el('td', {}, el('a', { href: '#events', onclick: () => { $('ev-route').value = id; $('ev-target').value = t.target; } }, t.target)), el('td', {}, badge(t.state)), el('td', { className: 'num' }, fmt(t.score, 3)),
      el('td', { className: 'num' }, fmt(t.samples, 0)), el('td', {}, t.cause || ''), el('td', {}, t.cooldown_until ? timeOf(t.cooldown_until) : ''))));
    $('rd-events').replaceChildren(...(r.events.length ? r.events.map(eventItem) : [el('li', {}, 'no events kept for this route')]));
  },
};

async function act(action) {
  const id = current.arg;
  const note = $('rd-action-note');
  note.textContent = '';
  try {
    const done = await post('/api/routes/' + encodeURIComponent(id) + '/' + action);
    if (done === null) { note.textContent = 'not sent: no token given'; return; }
    note.textContent = action + ': done';
    refresh();
  } catch (e) {
    note.textContent = action + ' refused: ' + e.message;
  }
}

// --- heatmap (one canvas drawing only the cells in view) ----------------

const hm = { data: null, rows: [], cell: 14, labelW: 280, headH: 120, cur: null, details: new Map() };

function stateColor(i) { return cssVar('--s-' + (hm.data ? hm.data.states[i] : 'none')); }

// effective is what a cell shows: a route out of use globally makes every
// pair of it unusable, so its state wins over the pair's.
function effective(row, c) {
  const code = row[3].charCodeAt(2 * c) - 48;
  const rs = hm.data.states[row[2]];
  if (rs === 'cooling' || rs === 'half_open' || rs === 'ejected' || rs === 'draining') return { state: row[2], score: -1, pair: code };
  // No pair record: no evidence against the pair (docs/design/006-model.md),
  // so the route's own state applies.
  if (code < 0 || code > 9) return { state: row[2], score: -1, pair: -1, inherited: true };
  return { state: code, score: row[3].charCodeAt(2 * c + 1) - 48, pair: code };
}

function hmFilter() {
  const q = $('hm-filter').value.trim().toLowerCase();
  hm.rows = !hm.data ? [] : q ? hm.data.rows.filter((r) => r[0].toLowerCase().includes(q) || r[1].toLowerCase().includes(q)) : hm.data.rows;
  if (!hm.data) return;
  $('hm-count').textContent = plural(hm.rows.length, 'route') + ' × ' + plural(hm.data.targets.length, 'target');
  const sp = $('hm-spacer');
  sp.style.width = hm.labelW + hm.data.targets.length * hm.cell + 'px';
  sp.style.height = hm.headH + hm.rows.length * hm.cell + 'px';
  drawHeatmap();
  // The tooltip follows the data: a cell under the pointer is described
  // again after each refresh.
  if (hm.tipPos && !$('hm-tip').hidden && hm.tipPos.r < hm.rows.length && hm.tipPos.c < hm.data.targets.length) describeCell($('hm-tip'), hm.tipPos);
}

function drawHeatmap() {
  const sc = $('hm-scroll'), cv = $('hm-canvas');
  if (!hm.data) return;
  const dpr = window.devicePixelRatio || 1;
  const w = sc.clientWidth, h = sc.clientHeight;
  if (cv.width !== w * dpr || cv.height !== h * dpr) { cv.width = w * dpr; cv.height = h * dpr; cv.style.width = w + 'px'; cv.style.height = h + 'px'; }
  const g = cv.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = cssVar('--card'); g.fillRect(0, 0, w, h);
  const { cell, labelW, headH } = hm;
  const x0 = sc.scrollLeft, y0 = sc.scrollTop;
  const c1 = Math.floor(x0 / cell), c2 = Math.min(hm.data.targets.length, Math.ceil((x0 + w - labelW) / cell) + 1);
  const r1 = Math.floor(y0 / cell), r2 = Math.min(hm.rows.length, Math.ceil((y0 + h - headH) / cell) + 1);
  const fg = cssVar('--fg'), muted = cssVar('--muted'), line = cssVar('--line');
  g.save(); g.beginPath(); g.rect(labelW, headH, w - labelW, h - headH); g.clip();
  for (let r = r1; r < r2; r++) {
    const row = hm.rows[r], y = headH + r * cell - y0;
    for (let c = c1; c < c2; c++) {
      const e = effective(row, c), x = labelW + c * cell - x0;
      g.fillStyle = stateColor(e.state);
      g.globalAlpha = e.inherited ? 0.3 : 1;
      if (e.score >= 0 && (hm.data.states[e.state] === 'healthy' || hm.data.states[e.state] === 'candidate')) g.globalAlpha = 0.45 + 0.55 * e.score / 9;
      g.fillRect(x + 1, y + 1, cell - 2, cell - 2);
    }
  }
  g.globalAlpha = 1;
  if (hm.cur) {
    g.strokeStyle = cssVar('--focus'); g.lineWidth = 2;
    g.strokeRect(labelW + hm.cur.c * cell - x0, headH + hm.cur.r * cell - y0, cell, cell);
  }
  g.restore();
  // Row labels, the group shown where it changes.
  g.save(); g.beginPath(); g.rect(0, headH, labelW, h - headH); g.clip();
  g.font = '11px system-ui'; g.textBaseline = 'middle';
  for (let r = r1; r < r2; r++) {
    const row = hm.rows[r], y = headH + r * cell - y0;
    if (r === 0 || hm.rows[r - 1][1] !== row[1]) {
      g.strokeStyle = line; g.beginPath(); g.moveTo(0, y + 0.5); g.lineTo(w, y + 0.5); g.stroke();
    }
    g.fillStyle = stateColor(row[2]); g.fillRect(2, y + 3, 8, cell - 6);
    g.fillStyle = fg;
    const label = (row[1] ? row[1] + ' · ' : '') + row[0];
    g.fillText(label.length > 44 ? label.slice(0, 43) + '…' : label, 14, y + cell / 2);
  }
  g.restore();
  // Column heads, rotated.
  g.save(); g.beginPath(); g.rect(labelW, 0, w - labelW, headH); g.clip();
  g.font = '11px system-ui'; g.fillStyle = muted;
  for (let c = c1; c < c2; c++) {
    const t = hm.data.targets[c], x = labelW + c * cell - x0 + cell / 2 + 4;
    g.save(); g.translate(x, headH - 4); g.rotate(-Math.PI / 3);
    g.fillText(t.length > 22 ? t.slice(0, 21) + '…' : t, 0, 0); g.restore();
  }
  g.restore();
}

// rowAt is the row whose label is under the pointer, or -1.
function rowAt(ev) {
  const rect = $('hm-canvas').getBoundingClientRect();
  const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
  const r = Math.floor((y - hm.headH + $('hm-scroll').scrollTop) / hm.cell);
  return x < hm.labelW && y >= hm.headH && r < hm.rows.length ? r : -1;
}

function cellAt(ev) {
  const cv = $('hm-canvas'), sc = $('hm-scroll');
  const rect = cv.getBoundingClientRect();
  const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
  if (x < hm.labelW || y < hm.headH) return null;
  const c = Math.floor((x - hm.labelW + sc.scrollLeft) / hm.cell), r = Math.floor((y - hm.headH + sc.scrollTop) / hm.cell);
  if (!hm.data || r < 0 || c < 0 || r >= hm.rows.length || c >= hm.data.targets.length) return null;
  return { r, c };
}

async function routeDetails(id) {
  const hit = hm.details.get(id);
  if (hit && Date.now() - hit.at < POLL_MS) return hit.r;
  const r = await get('/api/routes/' + encodeURIComponent(id));
  hm.details.set(id, { at: Date.now(), r });
  if (hm.details.size > 200) hm.details.delete(hm.details.keys().next().value);
  return r;
}

// describeCell writes the pair's evidence into node (the tooltip or the
// live region).
async function describeCell(node, pos) {
  const row = hm.rows[pos.r], target = hm.data.targets[pos.c];
  const e = effective(row, pos.c);
  const routeState = hm.data.states[row[2]];
  const pairState = e.pair >= 0 && e.pair <= 9 ? hm.data.states[e.pair] : 'no record, no evidence against it';
  const head = row[0] + ' × ' + target + ': ' + hm.data.states[e.state] + ' (route ' + routeState + ', pair ' + pairState + ')';
  node.textContent = head;
  try {
    const r = await routeDetails(row[0]);
    const p = r.targets.find((t) => t.target === target);
    if (hm.cur !== pos && node.id === 'hm-cell') return;
    node.textContent = head + (p ? ' — score ' + fmt(p.score, 3) + ', ' + p.samples + ' samples' + (p.cause ? ', cause ' + p.cause : '') +
      (p.cooldown_until ? ', cooling until ' + timeOf(p.cooldown_until) : '') : '') +
      ' — route score ' + fmt(r.score, 3) + (r.cause ? ', route cause ' + r.cause : '');
  } catch { /* the head is shown */ }
}

async function pairEvents(pos) {
  const row = hm.rows[pos.r], target = hm.data.targets[pos.c];
  $('hm-events-title').hidden = false;
  $('hm-events-title').textContent = 'Events of ' + row[0] + ' × ' + target;
  const q = '?route=' + encodeURIComponent(row[0]) + '&target=' + encodeURIComponent(target) + '&limit=100';
  const evs = await get('/api/events' + q);
  const global = await get('/api/events?route=' + encodeURIComponent(row[0]) + '&limit=100');
  const all = evs.concat(global.filter((e) => !e.target)).sort((a, b) => (a.time < b.time ? 1 : -1));
  $('hm-events').replaceChildren(...(all.length ? all.map(eventItem) : [el('li', {}, 'no events kept for this pair')]));
}

pages.heatmap = {
  async load() {
    const group = $('hm-group').value, n = $('hm-targets').value;
    hm.data = await get('/api/dash/heatmap?targets=' + n + '&group=' + encodeURIComponent(group));
    if (hm.cur && (hm.cur.r >= hm.data.rows.length || hm.cur.c >= hm.data.targets.length)) hm.cur = null;
    const leg = $('hm-legend');
    if (!leg.children.length) {
      leg.replaceChildren(...hm.data.states.map((s) => el('li', {}, el('span', { className: 'badge ' + s }), s.replace('_', ' '))),
        el('li', {}, 'faint: no pair record, the route\'s state applies; lighter healthy: lower score'));
    }
    hmFilter();
  },
};

function setupHeatmap() {
  const sc = $('hm-scroll'), cv = $('hm-canvas'), tip = $('hm-tip');
  sc.addEventListener('scroll', () => requestAnimationFrame(drawHeatmap), { passive: true });
  window.addEventListener('resize', () => requestAnimationFrame(drawHeatmap));
  let last = '';
  cv.addEventListener('mousemove', (ev) => {
    const pos = cellAt(ev);
    hm.tipPos = pos;
    if (!pos) { tip.hidden = true; last = ''; return; }
    tip.style.left = ev.clientX + 14 + 'px'; tip.style.top = ev.clientY + 14 + 'px';
    const key = pos.r + ':' + pos.c;
    if (key === last) return;
    last = key;
    tip.hidden = false;
    describeCell(tip, pos);
  });
  cv.addEventListener('mouseleave', () => { tip.hidden = true; last = ''; hm.tipPos = null; });
  cv.addEventListener('click', (ev) => {
    const row = rowAt(ev);
    if (row >= 0) { location.hash = routeHref(hm.rows[row][0]); return; } // a label opens its route
    const pos = cellAt(ev);
    if (!pos) return;
    hm.cur = pos; drawHeatmap();
    pairEvents(pos).catch((e) => status(e.message, true));
  });
  cv.addEventListener('keydown', (ev) => {
    if (!hm.data || !hm.rows.length) return;
    const cur = hm.cur || { r: 0, c: 0 };
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[ev.key]) {
      ev.preventDefault();
      const [dr, dc] = moves[ev.key];
      hm.cur = { r: Math.max(0, Math.min(hm.rows.length - 1, cur.r + dr)), c: Math.max(0, Math.min(hm.data.targets.length - 1, cur.c + dc)) };
      const y = hm.cur.r * hm.cell, x = hm.cur.c * hm.cell;
      if (y < sc.scrollTop) sc.scrollTop = y;
      if (y + hm.cell > sc.scrollTop + sc.clientHeight - hm.headH) sc.scrollTop = y + hm.cell - sc.clientHeight + hm.headH;
      if (x < sc.scrollLeft) sc.scrollLeft = x;
      if (x + hm.cell > sc.scrollLeft + sc.clientWidth - hm.labelW) sc.scrollLeft = x + hm.cell - sc.clientWidth + hm.labelW;
      drawHeatmap();
      describeCell($('hm-cell'), hm.cur);
    } else if (ev.key === 'Enter' && hm.cur) {
      pairEvents(hm.cur).catch((e) => status(e.message, true));
    }
  });
  for (const id of ['hm-group', 'hm-targets']) $(id).addEventListener('change', refresh);
  $('hm-filter').addEventListener('input', hmFilter);
}

// --- targets -----------------------------------------------------------

let targetRows = [];

// learnedPacing says what a target's 429s and bans taught: the tolerance,
// the routes held to a rate, the rate a new exit starts at once the site
// froze, and the brake a young first 429 puts on it for a second.
function learnedPacing(t) {
  const parts = [];
  if (t.tolerance) parts.push(fmt(t.tolerance, 1) + ' / window / exit');
  if (t.paced) parts.push(t.paced + ' routes at ' + fmt(t.paced_rate, 2) + ' req/s');
  if (t.frozen) parts.push('frozen: new exits at ' + fmt(t.frozen, 2) + ' req/s');
  if (t.braked) parts.push('braked: free exits at ' + fmt(t.braked, 2) + ' req/s');
  return parts.length ? parts.join(', ') : '–';
}

function drawTargets() {
  const q = $('tg-filter').value.trim().toLowerCase();
  const v = q ? targetRows.filter((t) => t.target.toLowerCase().includes(q)) : targetRows;
  $('tg-count').textContent = plural(v.length, 'target');
  $('tg-body').replaceChildren(...v.slice(0, 1000).map((t) => el('tr', { 'data-target': t.target },
    el('td', {}, el('a', { href: '#events', onclick: () => { $('ev-route').value = ''; $('ev-target').value = t.target; } }, t.target)),
    el('td', { className: 'num' }, fmt(t.good, 0)), el('td', { className: 'num' }, fmt(t.cooling, 0)),
    el('td', { className: 'num' }, fmt(t.banned, 0)), el('td', { className: 'num' }, fmt(t.samples, 0)),
    el('td', {}, learnedPacing(t)),
    el('td', {}, t.incident ? el('span', {}, badge('ejected'), ' ', t.incident, t.involved ? ' — ' + t.involved.join(', ') : '') : ''),
    el('td', {}, (t.recent || []).slice(0, 3).map((e) => timeOf(e.time) + ' ' + (e.open ? 'opened' : 'closed') + ' (' + (e.class || 'ok') + ')').join('; ')),
    el('td', {}, t.tier ? 'tier ' + t.tier.tier + (t.tier.serving !== t.tier.tier ? ', serving from ' + t.tier.serving : '') + (t.tier.reason ? ' — ' + t.tier.reason : '') : '–'))));
}

pages.targets = {
  async load() { targetRows = await get('/api/dash/targets'); drawTargets(); },
};

// --- cluster (GET /api/nodes; docs/design/013-cluster.md) ----------------

// testNode runs "test connection" (health, then an authenticated Ping) on
// the node at addr, with the admin token.
async function testNode(addr) {
  const out = $('cl-test');
  out.textContent = 'testing ' + addr + '…';
  try {
    const r = await post('/api/nodes/test', { address: addr });
    if (!r) { out.textContent = ''; return; }
    out.textContent = addr + ': ' + r.verdict + (r.node ? ' (node ' + r.node + (r.version ? ', ' + r.version : '') + ')' : '') +
      (r.error ? ' — ' + r.error : '') + ', ' + fmt(r.latency_ms, 1) + ' ms';
  } catch (e) {
    out.textContent = addr + ': ' + e.message;
  }
}

pages.cluster = {
  async load() {
    const nodes = await get('/api/nodes');
    $('cl-none').hidden = nodes.length > 0;
    $('cl-body').replaceChildren(...nodes.map((n) => el('tr', {},
      el('td', {}, (n.id || '?') + (n.self ? ' (this node)' : '')),
      el('td', {}, el('code', {}, n.address || '–')),
      el('td', {}, badge(n.state), n.last_error ? ' ' + n.last_error : ''),
      el('td', {}, n.version || '–'),
      el('td', { className: 'num' }, fmt(n.routes_usable, 0) + ' / ' + fmt(n.routes, 0)),
      el('td', {}, (n.labels || []).map((l) => l || '(none)').join('; ')),
      el('td', { className: 'num' }, fmt(n.inflight, 0)),
      el('td', { className: 'num' }, n.self ? fmt(n.forwarded_in, 0) + ' in' : fmt(n.forwarded_out, 0) + ' out'),
      el('td', {}, timeOf(n.last_check)),
      el('td', {}, n.self ? '' : el('button', { type: 'button', onclick: () => testNode(n.address) }, 'Test')))));
  },
};

// --- events (live, paused while the reader scrolls) ----------------------

// source is the stream's state: 'up' or 'down' (reconnecting).
const evs = { list: [], pending: 0, paused: false, manual: false, drawn: false, source: '' };

function evMatch(e) {
  const r = $('ev-route').value.trim(), t = $('ev-target').value.trim(), k = $('ev-kind').value;
  return (!r || e.route.includes(r)) && (!t || (e.target || '').includes(t)) && (!k || e.kind === k);
}

function drawEvents() {
  const v = evs.list.filter(evMatch).slice(0, 500);
  $('ev-list').replaceChildren(...(v.length ? v.map(eventItem) : [el('li', {}, 'no events yet')]));
  evs.pending = 0;
  showLive();
}

function showLive() {
  $('ev-pause').textContent = evs.paused ? 'Resume' : 'Pause';
  $('ev-pause').setAttribute('aria-pressed', String(evs.paused));
  $('ev-live').textContent = (evs.paused ? 'paused' + (evs.pending ? ': ' + evs.pending + ' new' : '') : 'live') +
    (evs.source === 'down' ? ' (reconnecting)' : '');
}

function addEvent(e) {
  evs.list.unshift(e);
  if (evs.list.length > MAX_EVENTS) evs.list.length = MAX_EVENTS;
  if (current && current.name === 'events') {
    if (evs.paused) { if (evMatch(e)) evs.pending++; showLive(); } else drawEvents();
  }
}

pages.events = {
  show() { drawEvents(); },
  async load() {
    if (evs.drawn) return;
    const old = await get('/api/events?limit=' + MAX_EVENTS);
    const seen = new Set(evs.list.map((e) => e.time + e.route + e.target + e.kind));
    evs.list = evs.list.concat(old.filter((e) => !seen.has(e.time + e.route + e.target + e.kind)))
      .sort((a, b) => (a.time < b.time ? 1 : -1)).slice(0, MAX_EVENTS);
    evs.drawn = true;
    drawEvents();
  },
};

function setupEvents() {
  const list = $('ev-list');
  list.addEventListener('scroll', () => {
    if (evs.manual) return;
    const away = list.scrollTop > 4;
    if (away !== evs.paused) { evs.paused = away; if (!away) drawEvents(); else showLive(); }
  }, { passive: true });
  $('ev-pause').addEventListener('click', () => {
    evs.paused = !evs.paused;
    evs.manual = evs.paused;
    if (!evs.paused) { list.scrollTop = 0; drawEvents(); } else showLive();
  });
  for (const id of ['ev-route', 'ev-target', 'ev-kind']) $(id).addEventListener('input', drawEvents);
  connectStream();
}

// connectStream opens the event stream. The browser reconnects by itself
// after a dropped connection, but gives up on an answer other than 200
// (a gateway shutting down, or at its cap of streams): then a new one is
// opened a few seconds later.
function connectStream() {
  const src = new EventSource('/api/events/stream');
  const take = (m) => {
    try { addEvent(JSON.parse(m.data)); } catch { return; }
    if (current && current.name !== 'events') refreshSoon();
  };
  src.addEventListener('state', take);
  src.addEventListener('incident', take);
  src.addEventListener('tier', take);
  src.addEventListener('dropped', (m) => status(m.data + ' events were dropped: this tab fell behind'));
  src.addEventListener('open', () => {
    if (evs.source === 'down') evs.drawn = false; // what was missed meanwhile is fetched again
    evs.source = 'up'; showLive();
  });
  src.addEventListener('error', () => {
    evs.source = 'down'; showLive();
    if (src.readyState === EventSource.CLOSED) setTimeout(connectStream, 5000);
  });
}

// --- try a request ------------------------------------------------------

pages.try = {}; // a form: nothing to poll

function setupTry() {
  $('try-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = Object.fromEntries(f.entries());
    const out = $('try-result');
    facts(out, [['Sending', body.method + ' ' + body.url]]);
    $('try-trace').hidden = true;
    $('try-submit').disabled = true;
    try {
      const r = await post('/api/try', body);
      if (r === null) { facts(out, [['Not sent', 'no admin token given']]); return; }
      const won = r.attempts.find((a) => a.class === 'ok');
      facts(out, [
        ['Status', r.status ? String(r.status) : 'no answer'], ['Route', won ? won.route : '–'], ['Attempts', String(r.attempts.length)],
        ['Error', r.error ? r.error + (r.detail ? ': ' + r.detail : '') : '–'], ['Latency', fmtMS(r.latency_ms)],
        ['Body', fmt(r.bytes, 0) + ' bytes' + (r.content_type ? ' (' + r.content_type + ')' : '')], ['Request', r.request_id],
      ]);
      $('try-attempts').replaceChildren(...r.attempts.map((a, i) => el('tr', {},
        el('td', {}, String(i + 1)), el('td', {}, '+' + fmtMS(a.start_ms)), el('td', {}, a.route),
        el('td', {}, a.class), el('td', {}, a.status ? String(a.status) : '–'), el('td', {}, fmtMS(a.latency_ms)),
        el('td', {}, [a.hedge ? 'hedge' : '', a.detail || ''].filter(Boolean).join('; ')))));
      $('try-trace').hidden = r.attempts.length === 0;
    } catch (e) {
      facts(out, [['Refused', e.message]]);
    } finally {
      $('try-submit').disabled = false;
    }
  });
}

// --- start ---------------------------------------------------------------

function start() {
  buildHead();
  $('rt-filter').addEventListener('input', applyView);
  $('rt-state').addEventListener('change', applyView);
  $('rt-scroll').addEventListener('scroll', () => requestAnimationFrame(drawRows), { passive: true });
  $('tg-filter').addEventListener('input', drawTargets);
  $('token-button').addEventListener('click', () => askToken());
  $('token-forget').addEventListener('click', () => auth.set(''));
  // Cancel is no submit button, so that Enter in the field uses the token.
  $('token-cancel').addEventListener('click', () => $('token-dialog').close('cancel'));
  for (const b of document.querySelectorAll('[data-action]')) b.addEventListener('click', () => act(b.dataset.action));
  setupHeatmap();
  setupEvents();
  setupTry();
  showAuth();
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', refresh);
  route();
  setInterval(refresh, POLL_MS);
  // Read once, whatever the first page: whether the gateway has a token
  // at all, for the header, and the label keys the heatmap may group by.
  get('/api/dash/overview').then((o) => {
    auth.readOnly = o.read_only; showAuth();
    for (const k of o.label_keys) $('hm-group').append(el('option', {}, k));
  }).catch(() => { /* the header stays; grouping stays off */ });
}

start();
