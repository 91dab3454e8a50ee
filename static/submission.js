// Submissions: the list (everyone's, or one submitter's) and one submission's page,
// which follows its jobs live over the server-sent events stream
// (`/v1/submissions/{id}/events`: a `snapshot` on every change, `done` at the end).

import {
  h, fresh, query, us, ci, times, tflops, num, when, utc, table, submitterHref, problemHref, submissionHref, submissionsHref,
  baselineName, ApiError, DEFAULT_BASELINE, noWorkerNote,
} from './lib.js';

const TERMINAL = new Set(['done', 'failed', 'cancelled']);
const finished = (v) => v.jobs.every((j) => TERMINAL.has(j.state));
const STATE_CLASS = { done: 'pass', failed: 'fail', running: 'active', queued: 'neutral', cancelled: 'neutral', deleted: 'neutral' };

function stateBadge(state) {
  return h('span', { class: `badge ${STATE_CLASS[state] || 'neutral'}` }, state);
}
function verdictBadge(verdict) {
  return h('span', { class: `badge ${verdict === 'pass' ? 'pass' : 'fail'}` }, verdict);
}
const problemLabel = (p) => `${p.m}×${p.n}×${p.k} ${p.acc} ${p.layout} ${p.arch}`;
const nameOf = (s) => s.name || `Submission ${s.id}`;
const LIMIT = 200;

// ---- The list ------------------------------------------------------------------------

export async function submissions(rest, params) {
  if (rest.length && rest[0] !== '') return submission(rest.join('/'));
  const who = params.get('submitter') || '';
  const list = await fresh(`/v1/submissions${query({ submitter: who, limit: LIMIT })}`);
  const input = h('input', { id: 'filter-submitter', name: 'submitter', value: who, autocomplete: 'off', spellcheck: 'false' });
  const form = h('form', {
    class: 'controls', role: 'search', 'aria-label': 'Filter submissions',
    onsubmit: (e) => { e.preventDefault(); location.hash = submissionsHref(input.value.trim()); },
  }, h('label', {}, 'Submitter', input), h('button', { type: 'submit', class: 'primary', id: 'filter-go' }, 'Show'),
  who ? h('a', { href: '#/submissions', id: 'filter-clear' }, 'All submitters') : null);
  const node = h('div', {},
    h('h1', {}, who ? `Submissions by ${who}` : 'Submissions'),
    h('p', { class: 'muted' }, 'Newest first. Each submission is one PTX artifact, run as one job per problem and device class: verified, then timed beside cuBLAS and cuBLASLt.',
      who ? [' ', h('a', { href: submitterHref(who) }, `${who}’s catalog entries`), '.'] : null),
    form,
    list.length
      ? h('div', { id: 'submissions' }, table(`${list.length} submission${list.length === 1 ? '' : 's'}`, [
        { label: 'Id', num: true, header: true, cell: (s) => h('a', { href: submissionHref(s.id) }, `#${s.id}`) },
        { label: 'Name', cell: (s) => h('a', { href: submissionHref(s.id), class: 'sub-name' }, nameOf(s)) },
        { label: 'Submitter', cell: (s) => h('a', { href: submitterHref(s.submitter), class: 'submitter' }, s.submitter) },
        { label: 'Status', cell: (s) => stateBadge(s.status) },
        { label: 'Created', cell: (s) => when(s.created_at) },
        { label: 'Jobs', num: true, cell: (s) => String(s.jobs) },
        { label: 'Passed', num: true, cell: (s) => String(s.passed) },
      ], list, (s) => ({ 'data-id': s.id })), list.length === LIMIT ? h('p', { class: 'muted' }, `The newest ${LIMIT} only.`) : null)
      : h('p', { class: 'note', id: 'no-submissions' }, who ? `No submissions by ${who}.` : 'No submissions yet.'),
    h('p', { class: 'muted' }, 'To submit a kernel, see ', h('a', { href: '#/' }, 'the home page'), '.'));
  return { title: who ? `Submissions by ${who}` : 'Submissions', node };
}

// ---- One submission ------------------------------------------------------------------

function facts(v) {
  const a = v.artifact;
  const row = (label, ...value) => [h('dt', {}, label), h('dd', {}, ...value)];
  return h('dl', { class: 'facts' },
    row('Status', h('span', { id: 'submission-status' }, stateBadge(v.status))),
    row('Submitter', h('a', { href: submitterHref(v.submitter), class: 'submitter', id: 'submission-submitter' }, v.submitter),
      ' · ', h('a', { href: submissionsHref(v.submitter) }, 'their submissions')),
    row('Created', when(v.created_at)),
    row('Artifact', h('a', { href: v.links.artifact, id: 'artifact-link', class: 'mono', download: `${a.sha256.slice(0, 12)}.ptx` }, `${a.sha256.slice(0, 12)}…`),
      ` PTX ${a.ptx_version}, ${a.target}, ${(a.size_bytes / 1024).toFixed(1)} KiB${v.has_source ? ', CUDA source included' : ''}`),
    ...(v.build ? built(v) : []));
}

// Source the service compiled: how (enough to rebuild the same PTX), and the source.
function built(v) {
  const b = v.build;
  const defines = Object.entries((b.options && b.options.defines) || {}).map(([k, x]) => `-D${k}=${x}`);
  const opts = [...defines, b.options && b.options.std, b.options && b.options.fast_math ? '--use_fast_math' : null].filter(Boolean).join(' ');
  const kernels = Object.entries(b.kernels || {}).map(([e, k]) => (e === k ? e : `${e} → ${k}`)).join(', ');
  return [
    h('dt', {}, 'Compiled'),
    h('dd', { id: 'submission-build' }, `NVRTC ${b.nvrtc_version} for ${b.arch}${opts ? ` with ${opts}` : ''}; headers ${b.header_set}; ${kernels}`,
      v.source ? h('details', { class: 'log' }, h('summary', {}, 'CUDA source'), h('pre', { tabindex: 0, class: 'mono' }, v.source)) : null),
  ];
}

function checks(job) {
  const run = job.run;
  const d = (run && run.details) || {};
  const list = Array.isArray(d.checks) ? d.checks : [];
  const dev = (run && run.device) || {};
  const about = [
    d.stage && `decided at stage “${d.stage}”`,
    d.worker && `worker ${d.worker}`,
    num(d.attempt) && `attempt ${d.attempt}`,
    num(d.duration_ms) && d.duration_ms > 0 && `${(d.duration_ms / 1000).toFixed(2)} s`,
    dev.name && [dev.name, dev.driver_version && `driver ${dev.driver_version}`].filter(Boolean).join(', '),
    run && `run ${run.id}, ${utc(run.measured_at)}`,
  ].filter(Boolean).join(' · ');
  const log = (title, text) => (text ? h('details', { class: 'log' }, h('summary', {}, title), h('pre', { tabindex: 0 }, text)) : null);
  return [
    about ? h('p', { class: 'muted' }, about) : null,
    job.error ? h('p', { class: 'error' }, h('strong', {}, 'Last attempt: '), job.error) : null,
    list.length
      ? table(`Verification checks (${list.filter((c) => c.passed).length} of ${list.length} passed)`, [
        { label: 'Check', header: true, cell: (c) => c.name },
        { label: 'Result', cell: (c) => h('span', { class: `badge ${c.passed ? 'pass' : 'fail'}` }, c.passed ? 'passed' : 'failed') },
        { label: 'Detail', cell: (c) => h('span', { class: 'check-detail' }, c.detail) },
        { label: 'Time', num: true, cell: (c) => (num(c.duration_ms) ? `${c.duration_ms.toFixed(1)} ms` : '—') },
      ], list, (c) => ({ class: c.passed ? null : 'failed' }))
      : h('p', { class: 'muted' }, run ? 'No checks recorded: the run ended before verification.' : 'No run stored yet.'),
    d.ptxas ? log(`ptxas ${d.ptxas.arch || ''}`.trim(), d.ptxas.log) : null,
    log('JIT log', d.jit_log),
  ];
}

const COLUMNS = [
  {
    label: 'Problem',
    cell: (j) => h('a', { href: problemHref(j.path, (j.run && j.run.device_class) || j.device_class), class: 'problem' },
      `${j.problem.m}×${j.problem.n}×${j.problem.k}`, ' ', h('span', {}, `${j.problem.acc} ${j.problem.layout} ${j.problem.arch}`)),
  },
  { label: 'Device class', cls: 'nowrap', cell: (j) => (j.run && j.run.device_class) || j.device_class || h('span', { class: 'muted' }, 'any') },
  {
    label: 'State',
    cell: (j) => {
      const stage = j.stage || (j.run && j.run.details && j.run.details.stage);
      return [stateBadge(j.state), stage && stage !== j.state ? h('span', { class: 'stage' }, ' ', stage) : null];
    },
  },
  { label: 'Verdict', cell: (j) => (j.run ? verdictBadge(j.run.verdict) : '—') },
  { label: 'Message', cls: 'message', cell: (j) => (j.run ? j.run.message : j.error) || '—' },
  {
    label: 'Median (graph)', num: true,
    cell: (j) => {
      const g = j.run && j.run.timings && j.run.timings.graph;
      if (!g) return '—';
      return [us(g.median_us), num(g.ci95_low_us) ? h('span', { class: 'ci' }, h('span', { class: 'visually-hidden' }, '95% CI '), ci(g.ci95_low_us, g.ci95_high_us)) : null];
    },
  },
  { label: 'TFLOP/s', num: true, cell: (j) => tflops(j.run && j.run.timings && j.run.timings.graph && j.run.timings.graph.tflops) },
  { label: `vs ${baselineName(DEFAULT_BASELINE)}`, num: true, cell: (j) => times(j.run && j.run.speedups && j.run.speedups.graph && j.run.speedups.graph[DEFAULT_BASELINE]) },
  {
    label: 'In catalog',
    cell: (j) => (!j.run ? '—' : j.run.in_catalog ? h('span', { class: 'in-catalog' }, h('span', { 'aria-hidden': 'true' }, '★ '), 'yes') : 'no'),
  },
];

/** The jobs table: a row per job, and under it a details row its button shows. */
function jobsTable(v, open) {
  const rows = v.jobs.flatMap((j) => {
    const expanded = open.has(j.id);
    const detailId = `checks-${j.id}`;
    const toggle = h('button', {
      type: 'button', id: `toggle-${j.id}`, class: 'toggle', 'aria-expanded': String(expanded), 'aria-controls': detailId,
      'aria-label': `Verification details: ${problemLabel(j.problem)}`,
      onclick: () => {
        const now = !open.has(j.id);
        if (now) open.add(j.id); else open.delete(j.id);
        toggle.setAttribute('aria-expanded', String(now));
        document.getElementById(detailId).hidden = !now;
      },
    }, 'Details');
    const any = j.run || j.error; // nothing to show before a run or a failed attempt
    return [
      h('tr', { 'data-job': j.id, class: `job ${j.state}` },
        COLUMNS.map((c, i) => h(i === 0 ? 'th' : 'td', { scope: i === 0 ? 'row' : null, class: [c.num ? 'num' : '', c.cls || ''].join(' ').trim() || null }, c.cell(j))),
        h('td', {}, any ? toggle : null)),
      any ? h('tr', { id: detailId, class: 'detail', hidden: !expanded }, h('td', { colspan: COLUMNS.length + 1 }, checks(j))) : null,
    ];
  });
  return h('div', { class: 'scroll' }, h('table', { id: 'jobs', class: 'jobs' },
    h('caption', {}, `${v.jobs.length} job${v.jobs.length === 1 ? '' : 's'}: one per problem and device class`),
    h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label)), h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Verification')))),
    h('tbody', {}, rows)));
}

function progress(v) {
  const counts = {};
  for (const j of v.jobs) counts[j.state] = (counts[j.state] || 0) + 1;
  const done = v.jobs.filter((j) => TERMINAL.has(j.state)).length;
  const parts = Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(', ');
  const jobs = `${v.jobs.length} job${v.jobs.length === 1 ? '' : 's'}`;
  return done === v.jobs.length ? `Finished: ${jobs} ended (${parts}).` : `Live: ${done} of ${jobs} finished (${parts}).`;
}

async function submission(raw) {
  if (!/^[1-9]\d{0,9}$/.test(raw)) {
    return { title: 'Not a submission', node: h('div', {}, h('h1', {}, 'Not a submission address'), h('p', {}, 'Expected #/submissions/ID, with a numeric id. ', h('a', { href: '#/submissions' }, 'All submissions'), '.')) };
  }
  let first;
  try {
    first = await fresh(`/v1/submissions/${raw}`);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    return { title: 'No such submission', node: h('div', {}, h('h1', {}, 'No such submission'), h('p', { class: 'note' }, err.message, '. ', h('a', { href: '#/submissions' }, 'All submissions'), '.')) };
  }
  const open = new Set();
  const live = h('p', { id: 'live', role: 'status', 'aria-live': 'polite', class: 'live' });
  const waiting = await noWorkerNote(first.jobs.filter((j) => !TERMINAL.has(j.state)).map((j) => j.device_class || null));
  const body = h('div', { id: 'submission' });
  const title = h('h1', { id: 'submission-name' });
  const description = h('p', { id: 'submission-description', class: 'lede' });
  let es = null;

  const say = (kind, text) => {
    live.className = `live is-${kind}`;
    live.dataset.state = kind;
    live.textContent = text;
  };
  const paint = (v) => {
    // Keep the control that had focus (a Details button) across the re-render.
    const focused = document.activeElement && body.contains(document.activeElement) ? document.activeElement.id : null;
    title.textContent = nameOf(v);
    description.textContent = v.description;
    description.hidden = !v.description;
    body.replaceChildren(facts(v), h('h2', {}, 'Jobs'), v.jobs.length ? jobsTable(v, open)
      : h('p', { class: 'note', id: 'no-jobs' }, 'No jobs: this submission came with an imported catalog bundle, so its runs are on the problem pages of the catalog, not here.'));
    const again = focused && document.getElementById(focused);
    if (again) again.focus();
    if (waiting) waiting.hidden = finished(v);
    if (!v.jobs.length) say('finished', '');
    else if (finished(v)) say('finished', progress(v));
    else if (es) say('live', progress(v));
  };
  paint(first);

  const follow = () => {
    if (finished(first)) return;
    es = new EventSource(first.links.events);
    say('live', progress(first));
    const read = (e) => {
      try {
        return JSON.parse(e.data);
      } catch {
        return null;
      }
    };
    es.addEventListener('snapshot', (e) => { const v = read(e); if (v) paint(v); });
    es.addEventListener('done', (e) => {
      es.close();
      const v = read(e);
      if (v) paint(v);
      else say('finished', 'Finished.');
    });
    // The browser reconnects by itself (the stream ends after 30 minutes); say so.
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) say('stopped', 'Live updates stopped: reload the page to refresh.');
      else say('stopped', 'Connection lost: reconnecting…');
    };
    es.onopen = () => { if (live.dataset.state === 'stopped') say('live', 'Live: reconnected.'); };
  };

  const node = h('div', {},
    h('p', {}, h('a', { href: '#/submissions' }, '← Submissions')),
    title, description, live, waiting, body);
  return { title: nameOf(first), node, after: follow, dispose: () => { if (es) es.close(); } };
}
