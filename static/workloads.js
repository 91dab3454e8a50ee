// Workloads: the GEMMs of popular models' decoder layers (`GET /v1/workloads`), and for
// one model a Linear × tokens table of how the catalog answers each GEMM: a served
// kernel's speedup over cuBLASLt autotuned (graph mode), a baseline that is faster, or
// nothing yet.

import { h, api, query, times, us, table, problemHref, baselineName, DEFAULT_BASELINE } from './lib.js';

const STATE_TEXT = { served: 'kernel served', baseline_faster: 'a baseline is faster', not_in_catalog: 'not in the catalog' };

export async function workloads(rest, params) {
  return rest[0] ? workload(decodeURIComponent(rest[0]), params) : list();
}

async function list() {
  const presets = await api('/v1/workloads');
  const node = h('div', {},
    h('h1', {}, 'Workloads'),
    h('p', { class: 'muted' }, 'The GEMMs of one decoder layer of popular open models, from their published configurations: every nn.Linear is a tn problem (N = out_features, K = in_features) at each token count, 1 to 8192.'),
    h('div', { id: 'workloads' }, table(null, [
      { label: 'Model', header: true, cell: (w) => h('a', { href: `#/workloads/${encodeURIComponent(w.config.name)}` }, w.config.title) },
      { label: 'Hidden', num: true, cell: (w) => String(w.config.hidden) },
      { label: 'Intermediate', num: true, cell: (w) => String(w.config.intermediate) },
      { label: 'Heads (KV)', num: true, cell: (w) => `${w.config.heads} (${w.config.kv_heads})` },
      { label: 'Experts', num: true, cell: (w) => (w.config.experts ? String(w.config.experts) : '—') },
      { label: 'GEMMs', num: true, cell: (w) => String(w.problems) },
    ], presets)));
  return { title: 'Workloads', node };
}

function cell(row) {
  if (!row) return h('span', { class: 'muted' }, '—');
  const label = `${row.linear} at ${row.tokens} tokens: ${STATE_TEXT[row.state]}`;
  if (row.state === 'served') {
    return h('a', { href: problemHref(row.path, row.device_class), class: 'wl served', 'data-state': row.state, title: `${label}, ${us(row.kernel_median_us)}`, 'aria-label': label }, times(row.speedup));
  }
  if (row.state === 'baseline_faster') {
    return h('a', { href: problemHref(row.path, row.device_class), class: 'wl baseline', 'data-state': row.state, title: `${label}: ${row.use_instead}, ${us(row.baseline_median_us)}`, 'aria-label': label }, 'baseline');
  }
  if (row.tune) {
    // Asked for and not answered yet: where its tune job stands.
    const asked = `${row.linear} at ${row.tokens} tokens: tune ${row.tune}`;
    return h('a', { href: problemHref(row.path, row.device_class), class: 'wl missing', 'data-state': row.state, 'data-tune': row.tune, title: asked, 'aria-label': asked }, row.tune);
  }
  return h('span', { class: 'wl missing', 'data-state': row.state, title: label, 'aria-label': label }, '—');
}

async function workload(name, params) {
  const device = params.get('device') || undefined;
  const acc = params.get('acc') || undefined;
  const w = await api(`/v1/workloads/${encodeURIComponent(name)}${query({ device, acc })}`);
  const tokens = [...new Set(w.rows.map((r) => r.tokens))].sort((a, b) => a - b);
  const at = new Map(w.rows.map((r) => [`${r.linear}|${r.tokens}`, r]));
  const s = w.summary;
  const node = h('div', {},
    h('p', {}, h('a', { href: '#/workloads' }, '← Workloads')),
    h('h1', { id: 'workload-title' }, w.title),
    h('p', { id: 'workload-summary' },
      `${s.problems} GEMMs (${w.acc}, ${w.arch}${w.device ? `, ${w.device}` : ''}): ${s.served} served by a kernel, ${s.baseline_faster} where a baseline is faster, ${s.not_in_catalog} not in the catalog yet. `,
      `Geometric-mean speedup over ${baselineName(DEFAULT_BASELINE)} (graph mode, each in its run’s timing regime): ${times(s.served_geomean)} on the served GEMMs, ${times(s.measured_geomean)} over every measured one (a baseline counts 1.0).`),
    h('div', { id: 'workload' }, table('Speedup of the served kernel per Linear and token count (M)', [
      { label: 'Linear (N × K)', header: true, cell: (l) => `${l.names} (${l.n} × ${l.k})` },
      ...tokens.map((t) => ({ label: String(t), num: true, cell: (l) => cell(at.get(`${l.names}|${t}`)) })),
    ], w.linears)));
  return { title: w.title, node };
}
