// Home: what kaas is, how to pull and submit, and headline figures computed from the
// catalog as it is now.

import { h, api, commandBox, pullCommand, times, problemHref, shape } from './lib.js';

function figure(value, label, id) {
  return h('li', {}, h('span', { class: 'value', id }, value), label);
}

export async function home() {
  const f = await api('/v1/stats');
  const origin = location.origin;
  // The service names an entry its kernel endpoint serves, so the commands work as shown.
  const example = f.example;
  const p = example ? example.problem : { m: 4096, n: 4096, k: 4096, acc: 'f32', layout: 'tn', arch: 'sm_90' };
  const device = example ? example.device_class : 'H100-SXM';
  const path = example ? example.path : `${p.arch}/${p.acc}/${p.layout}/${p.m}x${p.n}x${p.k}`;
  const devices = f.device_classes.length;
  const g = f.geomean_speedup_vs_autotune_max;
  const node = h('div', {},
    h('h1', {}, 'HGEMM kernels as a service'),
    h('p', { class: 'lede' },
      'kaas keeps a catalog of verified half-precision GEMM kernels — the best one per GPU and problem — and serves each as PTX with a launch manifest. ',
      'Every kernel is checked for exact and bounded-error results, then timed side by side with cuBLAS and cuBLASLt on the service’s own GPUs.'),
    h('h2', { id: 'figures' }, 'The catalog now'),
    h('ul', { class: 'figures', 'aria-labelledby': 'figures' },
      figure(String(f.problems_covered), ` problems with a kernel (of ${f.problems} in the database)`, 'fig-covered'),
      figure(String(f.kernels), ` distinct kernels (PTX artifacts) in ${f.entries} catalog entr${f.entries === 1 ? 'y' : 'ies'}`, 'fig-kernels'),
      figure(String(devices), ` device class${devices === 1 ? '' : 'es'}${devices ? `: ${f.device_classes.join(', ')}` : ''}`, 'fig-devices'),
      figure(g == null ? '—' : times(g),
        g == null ? ' speedup: no entry benchmarked yet'
          : ` geometric-mean speedup over cuBLASLt autotune (max), graph mode, each in its run’s timing regime (L2-cold where measured since regimes were named), across ${f.benchmarked_entries} benchmarked entr${f.benchmarked_entries === 1 ? 'y' : 'ies'}`,
        'fig-geomean')),
    h('p', {}, h('a', { class: 'button', href: '#/heatmap' }, 'Browse the catalog'), ' ', h('a', { href: '#/leaderboard' }, 'See the leaderboard')),
    h('h2', {}, 'Pull a kernel'),
    h('p', {}, 'With the CLI: PTX and manifest into a folder, for a device class and problem (here ',
      example ? h('a', { href: problemHref(path, device) }, `${shape(p)} ${p.acc} ${p.layout} on ${device}`) : 'an example', '):'),
    commandBox(pullCommand(p, device), 'kaas pull command'),
    h('p', {}, 'With curl: the kernel (manifest, timings, baselines) as JSON, then its PTX:'),
    commandBox(`curl -fsS '${origin}/v1/kernels/${path}?device=${device}'`, 'curl command for the kernel JSON'),
    commandBox(`curl -fsS -o kernel.ptx '${origin}/v1/kernels/${path}/ptx?device=${device}'`, 'curl command for the PTX'),
    h('p', {}, 'When no kernel beats cuBLAS for a problem, the answer is a 404 naming the faster library and its configuration (',
      h('code', {}, 'baseline_faster'), '), so a client can fall back without guessing.'),
    h('h2', {}, 'Submit a kernel'),
    h('p', {}, 'Ask an operator for a token (', h('code', {}, 'kaas token create --name YOU'), ') and put it in ', h('code', {}, 'KAAS_TOKEN'),
      '. Then submit the PTX with a launch manifest per problem; the command follows the run until every job has finished:'),
    commandBox(`kaas submit kernel.ptx --manifest m.json --url ${origin}`, 'kaas submit command'),
    h('p', {}, 'Each submission has a page that updates live as its jobs are verified and timed: see ',
      h('a', { href: '#/submissions' }, 'the submissions'), '. Without the CLI, PTX is uploaded content-addressed with the token:'),
    commandBox(`curl -fsS -H "Authorization: Bearer $KAAS_TOKEN" --data-binary @kernel.ptx '${origin}/v1/artifacts'`, 'curl command to upload PTX'),
    h('p', {}, 'A submission names the PTX, a launch manifest (ABI ', h('code', {}, 'kaas.hgemm.v1'),
      ') and its target problems; the service verifies it (exact {0,1} test, deviation bounded by NVIDIA’s own kernels, NaN-poisoned output, canaries) and benchmarks it in graph, offline and server modes (and paced, for large problems). ',
      'The endpoints and schemas are in the ', h('a', { href: '/docs/' }, 'API documentation'), '.'));
  return { title: 'Home', node };
}
