// Catalog heatmap: for one device class, arch, acc, layout and K, an M×N grid of the
// problems in the database, coloured by the catalog kernel's speedup over a baseline
// in one timing mode. Arrow keys move between cells; hover or focus shows the figures;
// Enter or a click opens the problem.

import { h, api, query, us, ci, times, tflops, baselineName, problemHref, DEFAULT_BASELINE, MODES, num } from './lib.js';

const SELECTORS = [
  ['device', 'Device class', (d) => d.device_classes, (d) => d.device_class],
  ['arch', 'Arch', (d) => d.archs, (d) => d.arch],
  ['acc', 'Accumulator', (d) => d.accs, (d) => d.acc],
  ['layout', 'Layout', (d) => d.layouts, (d) => d.layout],
  ['k', 'K', (d) => d.ks, (d) => d.k],
];
// Changing one of these can leave the chosen K absent, so K is chosen afresh.
const RESETS_K = new Set(['arch', 'acc', 'layout']);

/** Speedup range the colours span: 1/1.5× (full orange) to 1.5× (full blue). */
const SPAN = Math.log2(1.5);
const NEUTRAL = [242, 242, 242];
const FASTER = [24, 86, 160];
const SLOWER = [166, 60, 10];

function luminance([r, g, b]) {
  const lin = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

/** Background and a text colour with at least 4.5:1 contrast against it. */
export function colour(speedup) {
  const t = Math.max(-1, Math.min(1, Math.log2(speedup) / SPAN));
  const to = t >= 0 ? FASTER : SLOWER;
  const a = Math.abs(t) ** 0.75;
  const rgb = NEUTRAL.map((c, i) => Math.round(c + (to[i] - c) * a));
  // White text reaches 4.5:1 up to luminance 0.183, black from 0.175: one always does.
  const whiteContrast = 1.05 / (luminance(rgb) + 0.05);
  return { bg: `rgb(${rgb.join(',')})`, fg: whiteContrast >= 4.5 ? '#ffffff' : '#000000' };
}

function figuresOf(cell, mode, baseline) {
  const f = cell.modes[mode];
  return { f, speedup: f && num(f.speedups[baseline]) ? f.speedups[baseline] : null };
}

/** What a cell says, in words (its accessible name) and in its few characters. */
function describe(cell, k, mode, baseline) {
  const where = `M ${cell.m}, N ${cell.n}, K ${k}`;
  const { f, speedup } = figuresOf(cell, mode, baseline);
  switch (cell.state) {
    case 'kernel':
      if (speedup == null) {
        return { cls: 'nomode', text: '–', label: `${where}: kernel, no ${mode}-mode figure against ${baselineName(baseline)}` };
      }
      if (!cell.served) {
        // Not what the service answers: coloured like a served kernel it would read as one.
        return {
          cls: 'kernel unserved', text: `${speedup.toFixed(2)}×`,
          label: `${where}: kernel not served, a baseline is faster (${speedup.toFixed(3)}× ${baselineName(baseline)}, ${mode}); the answer is baseline_faster`,
        };
      }
      return {
        cls: 'kernel', text: `${speedup.toFixed(2)}×`, speedup,
        label: `${where}: ${speedup.toFixed(3)}× ${speedup >= 1 ? 'faster than' : 'the speed of'} ${baselineName(baseline)}, ${us(f.median_us)} (${mode})`,
      };
    case 'unbenchmarked':
      return { cls: 'unbenchmarked', text: 'unb.', label: `${where}: verified kernel, not benchmarked` };
    case 'baseline_only':
      return { cls: 'baseline_only', text: 'base', label: `${where}: no kernel; baselines only` };
    default:
      return { cls: 'empty', text: '', label: `${where}: nothing measured on this device class` };
  }
}

function detailsOf(cell, data, mode, baseline) {
  const { f, speedup } = figuresOf(cell, mode, baseline);
  const rows = [
    ['Problem', `${cell.m}×${cell.n}×${data.k} · ${data.acc} · ${data.layout} · ${data.arch}`],
    ['Device class', data.device_class],
    ['State', cell.state === 'kernel' && !cell.served ? 'kernel not served: a baseline is faster (the answer is baseline_faster)' : { kernel: 'benchmarked kernel, served', unbenchmarked: 'verified, not benchmarked', baseline_only: 'baselines only', empty: 'nothing measured' }[cell.state]],
  ];
  if (cell.submitter) rows.push(['Submitter', cell.submitter]);
  if (f) {
    rows.push([`Median (${mode})`, us(f.median_us)], ['95% CI', ci(f.ci95_low_us, f.ci95_high_us)], ['TFLOP/s', tflops(f.tflops)]);
    rows.push([`vs ${baselineName(baseline)}`, speedup == null ? '—' : times(speedup)]);
    for (const [b, x] of Object.entries(f.speedups)) if (b !== baseline) rows.push([`vs ${baselineName(b)}`, times(x)]);
  }
  if (num(cell.fastest_baseline_us[mode])) rows.push([`Fastest baseline (${mode})`, us(cell.fastest_baseline_us[mode])]);
  return h('div', {},
    h('h2', { class: 'visually-hidden' }, 'Cell details'),
    h('dl', {}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    h('p', {}, h('a', { href: problemHref(cell.path, data.device_class) }, 'Open the problem')));
}

function legend(baseline) {
  const stops = [1 / 1.5, 0.8, 0.9, 1, 1.1, 1.25, 1.5];
  return h('ul', { class: 'legend', 'aria-label': 'Legend' },
    stops.map((s) => {
      const c = colour(s);
      const sw = h('span', { class: 'swatch', 'aria-hidden': 'true' });
      sw.style.backgroundColor = c.bg;
      return h('li', {}, sw, `${s < 1 ? '≤' : ''}${s === 1 ? '1' : s.toFixed(2)}×${s >= 1.5 ? ' or more' : ''}`);
    }),
    h('li', {}, h('span', { class: 'swatch unserved', 'aria-hidden': 'true' }), 'kernel not served: a baseline is faster'),
    h('li', {}, h('span', { class: 'swatch nomode', 'aria-hidden': 'true' }), `kernel, no figure in this mode`),
    h('li', {}, h('span', { class: 'swatch unbenchmarked', 'aria-hidden': 'true' }), 'verified, not benchmarked'),
    h('li', {}, h('span', { class: 'swatch baseline_only', 'aria-hidden': 'true' }), 'no kernel, baselines only'),
    h('li', {}, h('span', { class: 'swatch empty', 'aria-hidden': 'true' }), 'nothing measured'),
    h('li', { class: 'muted' }, `Colour: speedup over ${baselineName(baseline)}; blue is faster.`));
}

/** Arrow keys, Home and End move focus between cells (one tab stop for the grid). */
function keyboard(table) {
  table.addEventListener('keydown', (e) => {
    const a = e.target.closest('a.cell');
    if (!a) return;
    const td = a.parentElement;
    const tr = td.parentElement;
    const rows = [...table.tBodies[0].rows];
    let r = rows.indexOf(tr);
    let c = [...tr.cells].indexOf(td);
    const at = (ri, ci) => rows[ri] && rows[ri].cells[ci] && rows[ri].cells[ci].querySelector('a.cell');
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    let target = null;
    if (step) {
      for (r += step[0], c += step[1]; r >= 0 && r < rows.length && c >= 1 && c < tr.cells.length; r += step[0], c += step[1]) {
        if ((target = at(r, c))) break;
      }
    } else if (e.key === 'Home' || e.key === 'End') {
      const cells = [...tr.querySelectorAll('a.cell')];
      target = e.key === 'Home' ? cells[0] : cells[cells.length - 1];
    } else return;
    e.preventDefault();
    if (target) {
      a.tabIndex = -1;
      target.tabIndex = 0;
      target.focus();
    }
  });
}

/** Where the kernel endpoint offers another class's kernels for this one's gaps, which
 *  this grid (one class's own measurements) does not show. */
function standIns(data) {
  if (!data.stand_ins || !data.stand_ins.length) return null;
  const others = data.stand_ins.join(', ');
  return h('p', { class: 'note', id: 'stand-in-note' },
    `This grid shows what was measured on ${data.device_class}. Where ${data.device_class} has no answer of its own (a baselines-only or empty cell), `,
    `the kernel endpoint offers ${others}’s kernel as a stand-in, labelled measured_on: ${others}, where it beats ${others}’s baselines and never failed on ${data.device_class}; `,
    'open the problem to see it.');
}

function caption(data, mode, baseline) {
  return `Speedup of the catalog kernel over ${baselineName(baseline)}, ${mode} mode, on ${data.device_class}: ` +
    `${data.arch} ${data.acc} ${data.layout}, K = ${data.k}. Rows are M, columns N.`;
}

function grid(data, mode, baseline, details) {
  const ms = [...new Set(data.cells.map((c) => c.m))].sort((a, b) => a - b);
  const ns = [...new Set(data.cells.map((c) => c.n))].sort((a, b) => a - b);
  const byMN = new Map(data.cells.map((c) => [`${c.m}x${c.n}`, c]));
  const show = (cell) => details.replaceChildren(detailsOf(cell, data, mode, baseline));
  let first = true;
  const table = h('table', { class: 'heatmap', id: 'heatmap', 'aria-describedby': 'heatmap-help' },
    h('caption', { class: 'visually-hidden' }, caption(data, mode, baseline)),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'M by N'), 'M \\ N'),
      ns.map((n) => h('th', { scope: 'col' }, String(n))))),
    h('tbody', {}, ms.map((m) => h('tr', {}, h('th', { scope: 'row' }, String(m)), ns.map((n) => {
      const cell = byMN.get(`${m}x${n}`);
      if (!cell) return h('td', { class: 'none' });
      const d = describe(cell, data.k, mode, baseline);
      const a = h('a', {
        class: `cell ${d.cls}`, href: problemHref(cell.path, data.device_class), 'aria-label': d.label,
        'data-path': cell.path, 'data-state': cell.state, tabindex: first ? 0 : -1,
      }, d.text);
      first = false;
      if (d.speedup != null) {
        const c = colour(d.speedup);
        a.style.backgroundColor = c.bg;
        a.style.color = c.fg;
      }
      a.addEventListener('mouseenter', () => show(cell));
      a.addEventListener('focus', () => show(cell));
      return h('td', {}, a);
    })))));
  keyboard(table);
  return table;
}

export async function heatmap(_rest, params) {
  const asked = Object.fromEntries(SELECTORS.map(([key]) => [key, params.get(key)]));
  const data = await api(`/v1/heatmap${query(asked)}`);
  const mode = MODES.includes(params.get('mode')) ? params.get('mode') : 'graph';
  const baseline = params.get('baseline') || DEFAULT_BASELINE;
  // The selection the service made, written into the address so it can be shared.
  const chosen = new URLSearchParams();
  for (const [key, , , value] of SELECTORS) if (value(data) != null) chosen.set(key, value(data));
  chosen.set('mode', mode);
  chosen.set('baseline', baseline);
  const go = (key, value) => {
    const next = new URLSearchParams(chosen);
    next.set(key, value);
    if (RESETS_K.has(key)) next.delete('k');
    location.hash = `#/heatmap?${next}`;
  };
  const select = (key, label, options, value, name = String) =>
    h('label', {}, label, h('select', { id: `sel-${key}`, name: key, onchange: (e) => go(key, e.target.value) },
      options.map((o) => h('option', { value: String(o), selected: String(o) === String(value) }, name(o)))));
  const baselines = [...new Set([DEFAULT_BASELINE, ...data.baselines])];
  const details = h('div', { class: 'details', id: 'cell-details' }, h('p', { class: 'muted' }, 'Hover over or focus a cell to see its figures.'));
  const body = data.cells.length
    ? h('div', { class: 'layout-2' },
      h('div', { class: 'scroll' }, h('p', { class: 'muted', 'aria-hidden': 'true' }, caption(data, mode, baseline)), grid(data, mode, baseline, details)),
      details)
    : h('p', { class: 'note', id: 'heatmap-empty' }, 'No problems in the database for this selection.');
  const node = h('div', {},
    h('h1', {}, 'Catalog'),
    h('p', { class: 'muted', id: 'heatmap-help' }, `${data.cells.length} problem${data.cells.length === 1 ? '' : 's'} in this selection. `,
      'Arrow keys move between cells; Enter opens a problem.'),
    h('form', { class: 'controls', 'aria-label': 'Selection', onsubmit: (e) => e.preventDefault() },
      SELECTORS.map(([key, label, options, value]) => select(key, label, options(data), value(data))),
      select('mode', 'Mode', MODES, mode),
      select('baseline', 'Baseline', baselines, baseline, baselineName)),
    legend(baseline),
    standIns(data),
    body);
  return {
    title: 'Catalog',
    node,
    after() {
      if (location.hash !== `#/heatmap?${chosen}`) history.replaceState(null, '', `#/heatmap?${chosen}`);
      performance.mark('kaas:heatmap');
    },
  };
}
