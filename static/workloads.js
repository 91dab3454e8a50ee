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
    h('p', { class: 'muted' }, 'The GEMMs of one decoder layer of popular open models, from their published configurations: every nn.Linear is a tn problem (N = out_features, K = in_features) at each token count, 1 to 8192. Open a model to see how the catalog answers each on a device class.'),
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
    return h('a', { href: problemHref(row.path, row.device_class), class: 'wl baseline', 'data-state': row.state, title: `${label}: ${row.use_instead}, ${us(row.baseline_median_us)}`, 'aria-label': label }, 'base');
  }
  if (row.tune) {
    // Asked for and not answered yet: where its tune job stands.
    const asked = `${row.linear} at ${row.tokens} tokens: tune ${row.tune}`;
    return h('a', { href: problemHref(row.path, row.device_class), class: 'wl missing', 'data-state': row.state, 'data-tune': row.tune, title: asked, 'aria-label': asked }, row.tune);
  }
  return h('span', { class: 'wl missing', 'data-state': row.state, title: label, 'aria-label': label }, '—');
}

async function workload(name, params) {
  const acc = params.get('acc') || undefined;
  // Figures belong to one device class: without one asked, the first class holding
  // kernels (as the catalog page), never a mix of classes.
  const stats = await api('/v1/stats');
  const device = params.get('device') || stats.device_classes[0] || undefined;
  const w = await api(`/v1/workloads/${encodeURIComponent(name)}${query({ device, acc })}`);
  const tokens = [...new Set(w.rows.map((r) => r.tokens))].sort((a, b) => a - b);
  const at = new Map(w.rows.map((r) => [`${r.linear}|${r.tokens}`, r]));
  const s = w.summary;
  const classes = [...new Set([...stats.device_classes, w.device].filter(Boolean))];
  const picker = classes.length
    ? h('form', { class: 'controls', 'aria-label': 'Device class', onsubmit: (e) => e.preventDefault() },
      h('label', {}, 'Device class', h('select', {
        id: 'sel-device', name: 'device',
        onchange: (e) => { location.hash = `#/workloads/${encodeURIComponent(name)}${query({ device: e.target.value, acc })}`; },
      }, classes.map((d) => h('option', { value: d, selected: d === w.device }, d)))))
    : null;
  const standIn = w.stand_ins && w.stand_ins.length
    ? h('p', { class: 'note', id: 'stand-in-note' },
      `These are ${w.device}’s own measurements. Where ${w.device} has no answer of its own, the kernel endpoint offers ${w.stand_ins.join(', ')}’s kernel as a stand-in (labelled measured_on), which this table does not count.`)
    : null;
  // Token counts are rows and Linears columns: 14 token counts side by side do not fit a
  // laptop's width, let alone a phone's; a model has only a handful of Linear shapes.
  const node = h('div', {},
    h('p', {}, h('a', { href: '#/workloads' }, '← Workloads')),
    h('h1', { id: 'workload-title' }, w.title),
    picker,
    h('p', { id: 'workload-summary' },
      `${s.problems} GEMMs (${w.acc}, ${w.arch}, on ${w.device || 'any device class'}): ${s.served} served by a kernel, ${s.baseline_faster} where a baseline is faster, ${s.not_in_catalog} not in the catalog yet. `,
      `Geometric-mean speedup over ${baselineName(DEFAULT_BASELINE)} (graph mode, each in its run’s timing regime): ${times(s.served_geomean)} on the served GEMMs, ${times(s.measured_geomean)} over every measured one (a baseline counts 1.0).`),
    standIn,
    h('div', { id: 'workload' }, table(`Speedup of the served kernel on ${w.device || 'any device class'} per token count (M) and Linear (N × K)`, [
      { label: 'Tokens', num: true, header: true, cell: (t) => String(t) },
      ...w.linears.map((l) => ({
        label: h('span', {}, l.names, h('span', { class: 'shape' }, `${l.n} × ${l.k}`)),
        num: true,
        cell: (t) => cell(at.get(`${l.names}|${t}`)),
      })),
    ], tokens)),
    h('p', { class: 'muted' }, 'A figure: a kernel is served, at that speedup. base: a baseline is faster (open it to see which, configured how). —: not in the catalog yet.'));
  return { title: w.title, node };
}
