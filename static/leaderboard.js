// Leaderboards: submitters ranked by problems held or by geometric-mean speedup over
// cuBLASLt-autotune-max; and each submitter's page with the catalog entries they hold
// and their latest submissions.

import {
  h, api, fresh, query, us, times, tflops, when, table, submitterHref, problemHref, submissionHref, submissionsHref, baselineName, DEFAULT_BASELINE,
} from './lib.js';

const ORDERS = {
  held: ['Problems held', (a, b) => b.problems_held - a.problems_held || (b.geomean_speedup_vs_autotune_max || 0) - (a.geomean_speedup_vs_autotune_max || 0)],
  geomean: ['Geometric-mean speedup', (a, b) => (b.geomean_speedup_vs_autotune_max || 0) - (a.geomean_speedup_vs_autotune_max || 0) || b.problems_held - a.problems_held],
};

export async function leaderboard(_rest, params) {
  const device = params.get('device') || undefined;
  const board = await api(`/v1/leaderboard${query({ device })}`);
  const by = ORDERS[params.get('by')] ? params.get('by') : 'held';
  const go = (next) => { location.hash = `#/leaderboard${query({ by, device: board.device_class, ...next })}`; };
  // Timings belong to a device class: the standings can count one class or all of them.
  const picker = h('form', { class: 'controls', 'aria-label': 'Device class', onsubmit: (e) => e.preventDefault() },
    h('label', {}, 'Device class', h('select', { id: 'sel-device', name: 'device', onchange: (e) => go({ device: e.target.value || undefined }) },
      h('option', { value: '', selected: !board.device_class }, 'All device classes'),
      board.device_classes.map((d) => h('option', { value: d, selected: d === board.device_class }, d)))));
  const rows = board.submitters.slice().sort((a, b) => ORDERS[by][1](a, b) || a.submitter.localeCompare(b.submitter));
  const node = h('div', {},
    h('h1', {}, board.device_class ? `Leaderboard on ${board.device_class}` : 'Leaderboard'),
    h('p', { class: 'muted' }, `Submitters by catalog entries held (a device class and problem where theirs is the kernel served) or by the geometric mean of their best speedup over ${baselineName(DEFAULT_BASELINE)} (graph mode, each run in its own timing regime; the problem pages name it) on the problems they entered.`),
    picker,
    h('div', { class: 'actions', role: 'group', 'aria-label': 'Rank by' },
      Object.entries(ORDERS).map(([key, [label]]) => h('button', {
        type: 'button', id: `by-${key}`, 'aria-pressed': String(key === by),
        onclick: () => go({ by: key }),
      }, label))),
    rows.length
      ? h('div', { id: 'leaderboard' }, table(`Ranked by ${ORDERS[by][0].toLowerCase()}`, [
        { label: 'Rank', num: true, header: true, cell: (_r, i) => String(i + 1) },
        { label: 'Submitter', cell: (r) => h('a', { href: submitterHref(r.submitter), class: 'submitter' }, r.submitter) },
        { label: 'Device classes', cell: (r) => r.device_classes.join(', ') },
        { label: 'Problems held', num: true, cell: (r) => String(r.problems_held) },
        { label: 'Problems entered', num: true, cell: (r) => String(r.problems_entered) },
        { label: `Geomean vs ${baselineName(DEFAULT_BASELINE)}`, num: true, cell: (r) => times(r.geomean_speedup_vs_autotune_max) },
      ], rows))
      : h('p', { class: 'note', id: 'no-standings' }, `No submitter holds or has entered a problem${board.device_class ? ` on ${board.device_class}` : ''} yet.`));
  return { title: 'Leaderboard', node };
}

export async function submitter(rest) {
  let name;
  try {
    name = decodeURIComponent(rest.join('/'));
  } catch {
    name = rest.join('/');
  }
  const [board, problems, subs] = await Promise.all([api('/v1/leaderboard'), api('/v1/problems'), fresh(`/v1/submissions${query({ submitter: name, limit: 11 })}`)]);
  const standing = board.submitters.find((s) => s.submitter === name);
  const held = problems.flatMap((p) => p.best.filter((b) => b.submitter === name).map((b) => ({ p, b })));
  held.sort((x, y) => x.b.device_class.localeCompare(y.b.device_class) || x.p.path.localeCompare(y.p.path));
  const node = h('div', {},
    h('p', {}, h('a', { href: '#/leaderboard' }, '← Leaderboard')),
    h('h1', { id: 'submitter-name' }, name),
    standing
      ? h('p', {}, `Rank ${standing.rank} by problems held: ${standing.problems_held} held, ${standing.problems_entered} entered, geometric-mean speedup ${times(standing.geomean_speedup_vs_autotune_max)} over ${baselineName(DEFAULT_BASELINE)}.`)
      : h('p', { class: 'note' }, 'This submitter has no ranked runs.'),
    h('h2', {}, 'Catalog entries held'),
    held.length
      ? h('div', { id: 'entries' }, table(null, [
        { label: 'Problem', header: true, cell: ({ p, b }) => h('a', { href: problemHref(p.path, b.device_class) }, `${p.problem.m}×${p.problem.n}×${p.problem.k} ${p.problem.acc} ${p.problem.layout} ${p.problem.arch}`) },
        { label: 'Device class', cell: ({ b }) => b.device_class },
        { label: 'Median (graph)', num: true, cell: ({ b }) => us(b.median_us) },
        { label: 'TFLOP/s', num: true, cell: ({ b }) => tflops(b.tflops) },
        { label: `vs ${baselineName(DEFAULT_BASELINE)}`, num: true, cell: ({ b }) => times(b.speedups && b.speedups[DEFAULT_BASELINE]) },
      ], held))
      : h('p', { class: 'muted' }, 'None right now.'),
    h('h2', {}, 'Latest submissions'),
    subs.length
      ? h('div', { id: 'latest-submissions' }, table(null, [
        { label: 'Submission', header: true, cell: (s) => h('a', { href: submissionHref(s.id) }, `#${s.id} ${s.name || ''}`.trim()) },
        { label: 'Status', cell: (s) => s.status },
        { label: 'Created', cell: (s) => when(s.created_at) },
        { label: 'Jobs passed', num: true, cell: (s) => (s.jobs ? `${s.passed} of ${s.jobs}` : '—') },
      ], subs.slice(0, 10)))
      : h('p', { class: 'muted' }, 'None.'),
    subs.length ? h('p', {}, h('a', { href: submissionsHref(name), id: 'all-submissions' }, `All submissions by ${name}`)) : null);
  return { title: name, node };
}
