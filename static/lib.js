// Shared helpers: DOM building (data only ever becomes text nodes, never markup),
// API fetches, number formatting, hash-route links and copyable commands.

/** Builds an element. String children become text nodes, so submitter-controlled
 *  strings are shown as text, never parsed as markup. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** An error whose message is the API's problem+json `detail`. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

const cache = new Map();
const CACHE_MS = 10000; // the service caches catalog answers as long

/** GETs JSON from the API; problem+json answers reject with ApiError. Answers are
 *  kept briefly so moving between views does not refetch. */
export function api(path) {
  const hit = cache.get(path);
  if (hit && performance.now() - hit.at < CACHE_MS) return hit.promise;
  const promise = fresh(path);
  promise.catch(() => cache.delete(path));
  cache.set(path, { at: performance.now(), promise });
  return promise;
}

/** GETs JSON from the API, uncached (for things that change: submissions). */
export function fresh(path) {
  return fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' }).then(async (r) => {
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new ApiError(r.status, body);
    return body;
  });
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v != null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

// Numbers
export const num = (x) => typeof x === 'number' && Number.isFinite(x);
export function us(x) {
  if (!num(x)) return '—';
  return x >= 1000 ? `${(x / 1000).toFixed(3)} ms` : x >= 100 ? `${x.toFixed(1)} µs` : `${x.toFixed(2)} µs`;
}
export const times = (x) => (num(x) ? `${x.toFixed(3)}×` : '—');
export const tflops = (x) => (num(x) ? x.toFixed(1) : '—');
export function ci(lo, hi) {
  return num(lo) && num(hi) ? `${us(lo)} – ${us(hi)}` : '—';
}
export function geomean(xs) {
  const v = xs.filter((x) => num(x) && x > 0);
  if (!v.length) return null;
  return Math.exp(v.reduce((a, x) => a + Math.log(x), 0) / v.length);
}

/** Names of the speedup tables' baselines, as people read them. */
const BASELINE_NAMES = {
  cublas_max: 'cuBLAS (max)',
  cublaslt_heuristic_max: 'cuBLASLt heuristic (max)',
  cublaslt_autotune_max: 'cuBLASLt autotune (max)',
  cublas: 'cuBLAS',
  cublaslt_heuristic: 'cuBLASLt heuristic',
  cublaslt_autotune: 'cuBLASLt autotune',
};
export const baselineName = (key) => BASELINE_NAMES[key] || key;
export const DEFAULT_BASELINE = 'cublaslt_autotune_max';
export const MODES = ['graph', 'offline', 'server', 'paced'];

// The cache regime of a run's figures (docs/verification.md, "Timing regimes").
const REGIME_NAMES = {
  l2_cold: 'L2-cold (inputs rotated over at least 2× the L2 cache)',
  l2_warm: 'L2-warm (one buffer set)',
  rotation_3_sets: 'three rotating buffer sets (timed before regimes were named)',
};
export const regimeName = (key) => REGIME_NAMES[key] || key || 'unknown regime';
export const RANKED_REGIME = 'l2_cold';

/** A timestamp as `2025-01-31 14:05 UTC`; `when` puts it in a <time> element. */
export function utc(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
export function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : h('time', { datetime: d.toISOString() }, utc(iso));
}

// Routes (hash based: every view has a shareable URL and no server routing is needed)
export function problemHref(path, device) {
  return `#/problem/${path}${query({ device })}`;
}
export function submitterHref(name) {
  return `#/submitter/${encodeURIComponent(name)}`;
}
export function submissionHref(id) {
  return `#/submissions/${id}`;
}
export function submissionsHref(submitter) {
  return `#/submissions${query({ submitter })}`;
}
export function shape(p) {
  return `${p.m}×${p.n}×${p.k}`;
}

/** `kaas pull` for a problem on a device class, from this server: `--url` named, since
 *  the CLI's default (127.0.0.1:8080) may be another server than the one showing this. */
export function pullCommand(p, device) {
  return `kaas pull --url ${location.origin} --device ${device} --problem ${p.m}x${p.n}x${p.k} --acc ${p.acc} --layout ${p.layout} -o ./${p.m}x${p.n}x${p.k}-${p.acc}-${p.layout}`;
}

/** A note when no GPU worker that could run work for `classes` (a device class each,
 *  null for any GPU) has been seen lately: queued work then waits with no end, and the
 *  page must say so rather than look stuck. Null when one can, or health cannot say. */
export async function noWorkerNote(classes) {
  if (!classes.length) return null;
  let health;
  try {
    health = await fresh('/v1/health');
  } catch (err) {
    health = err instanceof ApiError ? err.body : null; // 503 when not ready: same body
  }
  if (!health || !Array.isArray(health.workers)) return null;
  const live = health.workers.filter((w) => w.state === 'idle' || w.state === 'busy').map((w) => w.device_class);
  const missing = [...new Set(classes.filter((c) => (c == null ? !live.length : !live.includes(c))).map((c) => c || 'any GPU'))];
  if (!missing.length) return null;
  return h('p', { class: 'note', id: 'no-worker' },
    `No GPU worker for ${missing.join(', ')} has been seen by this service lately: this waits in the queue until one starts `,
    '(', h('code', {}, 'kaas serve --workers auto'), ', or ', h('code', {}, 'kaas worker --gpu N'), ' on a GPU machine with the same database).');
}

/** A command in a <pre> with a copy button that says whether copying worked. */
export function commandBox(text, label) {
  const pre = h('pre', { tabindex: 0, 'aria-label': label }, h('code', {}, text));
  const status = h('span', { class: 'visually-hidden', role: 'status' });
  const button = h('button', {
    type: 'button',
    'aria-label': `Copy: ${label}`,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = 'Copied';
      } catch {
        const range = document.createRange();
        range.selectNodeContents(pre);
        const sel = getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        button.textContent = 'Selected: press Ctrl+C';
      }
      status.textContent = button.textContent;
      setTimeout(() => { button.textContent = 'Copy'; }, 2500);
    },
  }, 'Copy');
  return h('div', { class: 'cmd' }, pre, button, status);
}

/** A table from column definitions `{ label, num?, cell(row) }`. */
export function table(caption, columns, rows, rowProps) {
  return h('div', { class: 'scroll' }, h('table', {},
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label)))),
    h('tbody', {}, rows.map((r, i) => h('tr', rowProps ? rowProps(r, i) : {},
      columns.map((c, j) => (j === 0 && c.header
        ? h('th', { scope: 'row', class: c.num ? 'num' : null }, c.cell(r, i))
        : h('td', { class: c.num ? 'num' : null }, c.cell(r, i)))))))));
}

export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' }, h('strong', {}, 'Could not load: '), err && err.message ? err.message : String(err));
}
