// Problem page: the ranked kernels of one problem on one device class, the catalog
// kernel's timings, speedups, verification and launch manifest, the baseline table,
// downloads and the `kaas pull` command.

import {
  h, api, fresh, query, us, ci, times, tflops, num, baselineName, submitterHref, problemHref, submissionHref, commandBox, pullCommand, table,
  ApiError, DEFAULT_BASELINE, MODES, RANKED_REGIME, regimeName, noWorkerNote,
} from './lib.js';

const WORD = /^[A-Za-z0-9_.-]{1,32}$/;

function parsePath(rest) {
  if (rest.length !== 4 || !rest.every((w) => WORD.test(w))) return null;
  const [arch, acc, layout, shape] = rest;
  const m = /^(\d+)x(\d+)x(\d+)$/.exec(shape);
  if (!m) return null;
  return { arch, acc, layout, m: +m[1], n: +m[2], k: +m[3], path: rest.join('/') };
}

/** The kernel endpoint's answer: the view, or the 404 that says what to use instead. */
async function kernelOrReason(path, device) {
  try {
    return { kernel: await api(`/v1/kernels/${path}${query({ device })}`) };
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return { reason: err };
    throw err;
  }
}

function downloads(p, k) {
  const base = `kaas-${p.m}x${p.n}x${p.k}-${p.acc}-${p.layout}-${k.device_class}`;
  const manifest = new Blob([`${JSON.stringify(k.manifest, null, 2)}\n`], { type: 'application/json' });
  return h('div', { class: 'actions' },
    h('a', { class: 'button', id: 'download-ptx', href: `/v1/kernels/${p.path}/ptx${query({ device: k.device_class })}`, download: `${base}.ptx` },
      `Download PTX (${(k.artifact.size_bytes / 1024).toFixed(1)} KiB)`),
    h('a', { class: 'button', id: 'download-manifest', href: URL.createObjectURL(manifest), download: `${base}.manifest.json` }, 'Download manifest (JSON)'),
    h('a', { href: k.artifact.url, id: 'artifact-link' }, `artifact ${k.artifact.sha256.slice(0, 12)}…`));
}

function timingsTable(run) {
  const t = run.timings || {};
  const modes = MODES.filter((m) => t[m]).concat(Object.keys(t).filter((m) => !MODES.includes(m)));
  if (!modes.length) return h('p', { class: 'muted' }, 'Not benchmarked: verified only.');
  return table(`Timings of the catalog kernel by mode, ${regimeName(run.regime)}`, [
    { label: 'Mode', header: true, cell: (m) => m },
    { label: 'Median', num: true, cell: (m) => us(t[m].median_us) },
    { label: '95% CI of the median', num: true, cell: (m) => ci(t[m].ci95_low_us, t[m].ci95_high_us) },
    { label: 'p10 – p90', num: true, cell: (m) => ci(t[m].p10_us, t[m].p90_us) },
    { label: 'Mean', num: true, cell: (m) => us(t[m].mean_us) },
    { label: 'TFLOP/s', num: true, cell: (m) => tflops(t[m].tflops) },
    { label: 'Samples', num: true, cell: (m) => (num(t[m].samples) ? String(t[m].samples) : '—') },
  ], modes);
}

function speedupsTable(run) {
  const s = run.speedups || {};
  const modes = MODES.filter((m) => s[m]);
  if (!modes.length) return null;
  const names = [...new Set(modes.flatMap((m) => Object.keys(s[m])))].sort();
  return table(`Speedup over each baseline (above 1× is faster), measured side by side in the same run, ${regimeName(run.regime)}`, [
    { label: 'Baseline', header: true, cell: (b) => baselineName(b) },
    ...modes.map((m) => ({ label: m, num: true, cell: (b) => times(s[m][b]) })),
  ], names);
}

// Every regime the run was timed in, side by side: the rotation and graph-mode figures.
function regimesTable(run) {
  const r = run.regimes || {};
  const names = Object.keys(r).sort((a, b) => (b === RANKED_REGIME) - (a === RANKED_REGIME) || a.localeCompare(b));
  if (!names.length) return null;
  const g = (n) => (r[n].timings && r[n].timings.graph) || {};
  return table('Graph-mode figures in each cache regime (the catalog ranks by L2-cold)', [
    { label: 'Regime', header: true, cell: (n) => regimeName(n) + (n === RANKED_REGIME ? ' — ranked' : '') },
    { label: 'Buffer sets', num: true, cell: (n) => String(r[n].buffer_sets) },
    { label: '× L2', num: true, cell: (n) => (num(r[n].l2_multiple) ? r[n].l2_multiple.toFixed(1) : '—') },
    { label: 'Median', num: true, cell: (n) => us(g(n).median_us) },
    { label: `vs ${baselineName(DEFAULT_BASELINE)}`, num: true, cell: (n) => times(r[n].speedups && r[n].speedups.graph && r[n].speedups.graph[DEFAULT_BASELINE]) },
  ], names, (n) => ({ 'data-regime': n }));
}

function verification(run) {
  const d = run.device || {};
  const device = [d.name || d.model, d.driver_version && `driver ${d.driver_version}`, (d.cuda_driver_api_version || d.cuda_version) && `CUDA ${d.cuda_driver_api_version || d.cuda_version}`,
    d.cublas_version && `cuBLAS ${d.cublas_version}`].filter(Boolean).join(', ');
  return h('div', { id: 'verification' },
    h('p', {}, h('span', { class: `badge ${run.verdict === 'pass' ? 'pass' : 'fail'}` }, run.verdict), ` run ${run.id} on ${run.device_class}, ${new Date(run.measured_at).toUTCString()}`),
    h('p', { id: 'run-message' }, run.message),
    device ? h('p', { class: 'muted' }, device) : null);
}

function launches(manifest) {
  return table(`Launch manifest (ABI ${manifest.abi}), workspace ${manifest.workspace_bytes} bytes`, [
    { label: 'Entry', header: true, cell: (l) => h('code', {}, l.entry) },
    { label: 'Grid', cell: (l) => l.grid.join('×') },
    { label: 'Block', cell: (l) => l.block.join('×') },
    { label: 'Cluster', cell: (l) => (l.cluster || [1, 1, 1]).join('×') },
    { label: 'Shared memory', num: true, cell: (l) => `${l.shared_mem_bytes} B` },
    { label: 'Params', num: true, cell: (l) => String(l.params.length) },
  ], manifest.launches);
}

function baselinesTable(rows) {
  if (!rows.length) return h('p', { class: 'muted' }, 'No baselines measured on this device class.');
  const order = (m) => (MODES.includes(m) ? MODES.indexOf(m) : MODES.length);
  const sorted = rows.slice().sort((a, b) => order(a.mode) - order(b.mode) || a.median_us - b.median_us);
  return table('cuBLAS and cuBLASLt on this device class, fastest first per mode', [
    { label: 'Library', header: true, cell: (b) => baselineName(b.library) },
    { label: 'Layout', cell: (b) => b.layout },
    { label: 'Mode', cell: (b) => b.mode },
    { label: 'Median', num: true, cell: (b) => us(b.median_us) },
    { label: '95% CI', num: true, cell: (b) => ci(b.timing && b.timing.ci95_low_us, b.timing && b.timing.ci95_high_us) },
    { label: 'Configuration', cell: (b) => h('code', {}, JSON.stringify(b.config)) },
  ], sorted);
}

function ranking(rows, kernel, device) {
  if (!rows.length) return h('p', { class: 'muted', id: 'ranking-empty' }, `No passing, benchmarked run on ${device} yet.`);
  const current = kernel && kernel.device_class === device ? kernel.run.id : null;
  const graph = kernel && kernel.run.timings && kernel.run.timings.graph;
  return h('div', { id: 'ranking' }, table(`Each submitter’s best passing run on ${device}, fastest first (graph mode)`, [
    { label: 'Rank', num: true, header: true, cell: (r) => String(r.rank) },
    { label: 'Submitter', cell: (r) => [h('a', { href: submitterHref(r.submitter), class: 'submitter' }, r.submitter), r.run_id === current ? h('span', { class: 'muted' }, ' (catalog kernel)') : null] },
    { label: 'Median', num: true, cell: (r) => us(r.median_us) },
    { label: '95% CI', num: true, cell: (r) => (r.run_id === current && graph ? ci(graph.ci95_low_us, graph.ci95_high_us) : '—') },
    { label: 'TFLOP/s', num: true, cell: (r) => tflops(r.tflops) },
    { label: `vs ${baselineName(DEFAULT_BASELINE)}`, num: true, cell: (r) => times(r.speedup_vs_autotune_max) },
    { label: 'Measured', cell: (r) => r.measured_at.slice(0, 10) },
    { label: 'Submission', num: true, cell: (r) => (r.submission_id ? h('a', { href: submissionHref(r.submission_id), class: 'submission' }, `#${r.submission_id}`) : '—') },
  ], rows, (r) => ({ class: r.run_id === current ? 'current' : null, 'data-run': r.run_id })));
}

/// The problem's tune on `device`, if it was ever asked for (`null` when not).
async function tuneOf(path, device) {
  try {
    return await fresh(`/v1/tunes/${path}${query({ device })}`);
  } catch (e) {
    return null;
  }
}

/// A requested problem's state and its search trace: each code tried, its time, and the
/// codes verified.
function tuneSection(t, waiting) {
  if (!t) return null;
  const where = t.queue_position ? ` (#${t.queue_position} in the queue)` : '';
  const trace = t.trace;
  return h('div', { id: 'tune' },
    h('h2', {}, 'Tuning'),
    h('p', { id: 'tune-state', 'data-state': t.state }, `Requested tune on ${t.device_class}: `, h('strong', {}, t.state), where,
      t.stage && !['served', 'baseline_faster', 'failed'].includes(t.state) ? ` — ${t.stage}` : '', t.message ? `. ${t.message}` : ''),
    waiting,
    trace && trace.tried && trace.tried.length ? table(`Search trace: ${trace.tried.length} codes tried in ${(trace.search_ms / 1000).toFixed(1)} s (stopped: ${trace.stopped}), against ${trace.reference} at ${us(trace.reference_us)}`, [
      { label: '#', num: true, header: true, cell: (r) => String(r.i + 1) },
      { label: 'Code', cell: (r) => h('code', {}, r.code) },
      { label: 'Time', num: true, cell: (r) => (r.us ? us(r.us) : (r.error || 'failed')) },
      { label: 'vs reference', num: true, cell: (r) => times(r.reward) },
      { label: 'Seeded', cell: (r) => (r.seeded ? 'yes' : '') },
      { label: 'At', num: true, cell: (r) => `${(r.at_ms / 1000).toFixed(1)} s` },
    ], trace.tried.map((r, i) => ({ ...r, i }))) : null,
    trace && trace.retimed && trace.retimed.length ? table('Finalists re-timed side by side with the reference (graph mode, L2-cold); verified in this order', [
      { label: 'Code', header: true, cell: (r) => h('code', {}, r.code) },
      { label: 'Median', num: true, cell: (r) => us(r.median_us) },
      { label: 'vs reference', num: true, cell: (r) => times(r.speedup) },
    ], trace.retimed) : null,
    trace && trace.verified && trace.verified.length ? table('Verified', [
      { label: 'Code', header: true, cell: (r) => h('code', {}, r.code) },
      { label: 'Verdict', cell: (r) => r.verdict },
      { label: 'Message', cell: (r) => r.message },
    ], trace.verified) : null);
}

export async function problem(rest, params) {
  const p = parsePath(rest);
  if (!p) return { title: 'Not a problem', node: h('div', {}, h('h1', {}, 'Not a problem address'), h('p', {}, 'Expected #/problem/ARCH/ACC/LAYOUT/MxNxK.')) };
  const asked = params.get('device');
  const [board, answer] = await Promise.all([api(`/v1/leaderboard/${p.path}`), kernelOrReason(p.path, asked)]);
  const kernel = answer.kernel;
  const tune = await tuneOf(p.path, asked || (kernel && kernel.device_class) || (answer.reason && answer.reason.body.device_class));
  const reasonDevice = answer.reason && answer.reason.body.device_class;
  // The answer names the canonical class of what was asked (`h200` → `H200`); a
  // stand-in's kernel (`fallback`) is for the class asked, not the one it ran on.
  const answered = kernel ? (kernel.fallback ? kernel.fallback.requested_device : kernel.device_class) : reasonDevice;
  const device = answered || asked || (board.rows[0] && board.rows[0].device_class) || null;
  const fallback = kernel && kernel.fallback;
  const devices = [...new Set([device, ...board.rows.map((r) => r.device_class), ...(kernel ? kernel.other_device_classes : [])].filter(Boolean))].sort();
  const title = `${p.m}×${p.n}×${p.k} ${p.acc} ${p.layout}`;
  const picker = devices.length > 1
    ? h('label', {}, 'Device class ', h('select', { id: 'sel-device', onchange: (e) => { location.hash = problemHref(p.path, e.target.value); } },
      devices.map((d) => h('option', { value: d, selected: d === device }, d))))
    : h('span', {}, device ? `Device class: ${device}` : 'No device class has measured this problem yet.');
  let entry;
  if (kernel) {
    entry = [
      fallback ? h('p', { class: 'note', id: 'fallback-note' }, `Measured on ${fallback.measured_on}, not ${fallback.requested_device}: ${fallback.note}`) : null,
      h('p', {}, fallback ? `${fallback.measured_on}’s catalog kernel ` : 'Catalog kernel ', h('strong', { id: 'kernel-name' }, kernel.name || '(unnamed)'), ' by ',
        h('a', { href: submitterHref(kernel.submitter), class: 'submitter' }, kernel.submitter),
        fallback ? `: no speedup on ${fallback.requested_device} is claimed.`
          : kernel.benchmarked ? `, faster than ${kernel.beats.length ? kernel.beats.map(baselineName).join(', ') : 'no baseline'} in graph mode (${regimeName(kernel.run.regime)}), by at least 1%.` : ', verified but not benchmarked.'),
      downloads(p, kernel),
      h('h3', {}, 'Pull it'),
      commandBox(pullCommand(p, kernel.device_class), 'kaas pull command'),
      commandBox(`curl -fsS -o kernel.ptx '${location.origin}/v1/kernels/${p.path}/ptx${query({ device: kernel.device_class })}'`, 'curl command for the PTX'),
      h('h2', {}, fallback ? `Timings on ${fallback.measured_on}` : 'Timings'), timingsTable(kernel.run), speedupsTable(kernel.run), regimesTable(kernel.run),
      h('h2', {}, 'Verification'), verification(kernel.run),
      h('h2', {}, 'Launch'), launches(kernel.manifest),
    ];
  } else {
    const u = answer.reason.body.use_instead;
    entry = [
      h('p', { class: 'note', id: 'no-kernel' }, answer.reason.message),
      u ? table('What to use instead', [
        { label: 'Library', header: true, cell: (b) => baselineName(b.library) },
        { label: 'Layout', cell: (b) => b.layout }, { label: 'Mode', cell: (b) => b.mode },
        { label: 'Median', num: true, cell: (b) => us(b.median_us) },
        { label: 'Configuration', cell: (b) => h('code', {}, JSON.stringify(b.config)) },
      ], [u]) : null,
    ];
  }
  const node = h('div', {},
    h('p', {}, h('a', { href: `#/heatmap${query({ device, arch: p.arch, acc: p.acc, layout: p.layout, k: p.k })}` }, '← Catalog')),
    h('h1', {}, title),
    h('p', { class: 'muted' }, `${p.arch} · ${p.acc === 'f32' ? 'fp32' : 'fp16'} accumulate · ${p.layout} layout (A row-major M×K, B ${p.layout === 'tn' ? 'N×K row-major' : 'K×N row-major'}, C row-major M×N)`),
    h('div', { class: 'controls' }, picker),
    h('h2', {}, 'Ranking'), device ? ranking(board.rows.filter((r) => r.device_class === device), kernel, device) : null,
    h('h2', {}, 'Catalog kernel'), entry,
    tuneSection(tune, tune && tune.state === 'queued' ? await noWorkerNote([tune.device_class]) : null),
    h('h2', {}, fallback ? `Baselines on ${fallback.measured_on}` : 'Baselines'), kernel ? baselinesTable(kernel.baselines) : h('p', { class: 'muted' }, 'The baseline table comes with a catalog kernel; the fastest baseline is named above.'));
  return { title, node };
}
