// The router: `#/view/rest?query` picks a view, which renders into <main>.
// Views: home, heatmap, problem, leaderboard, submitter, submissions (the list, and one
// submission at `#/submissions/ID`), workloads (the list, and one at `#/workloads/NAME`). A view returns `{ title, node, after?, dispose? }`:
// `after` runs once the node is in the page, `dispose` when the page is left (e.g. to
// close a live event stream).

import { h, errorBox } from './lib.js';
import { home } from './home.js';
import { heatmap } from './heatmap.js';
import { problem } from './problem.js';
import { leaderboard, submitter } from './leaderboard.js';
import { submissions } from './submission.js';
import { workloads } from './workloads.js';

const VIEWS = { '': home, heatmap, problem, leaderboard, submitter, submissions, workloads };
const NAV = { '': 'home', heatmap: 'heatmap', problem: 'heatmap', leaderboard: 'leaderboard', submitter: 'leaderboard', submissions: 'submissions', workloads: 'workloads' };

let generation = 0;
let lastView = null;
let current = null; // the content shown, to dispose of when it is replaced

/** Splits `#/problem/sm_90/f32/tn/64x64x64?device=X` into view, path rest and params. */
export function parseHash(hash) {
  const raw = hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  const [view, ...rest] = path.split('/');
  return { view, rest, params };
}

async function render() {
  const main = document.getElementById('main');
  if (location.hash === '#main') return; // the skip link
  const { view, rest, params } = parseHash(location.hash);
  const fn = VIEWS[view];
  const mine = ++generation;
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === NAV[view]) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  let content;
  try {
    content = fn
      ? await fn(rest, params)
      : { title: 'Not found', node: h('div', {}, h('h1', {}, 'Nothing here'), h('p', {}, 'This address is not a page of the kaas UI. ', h('a', { href: '#/' }, 'Go home'), '.')) };
  } catch (err) {
    content = { title: 'Error', node: h('div', {}, h('h1', {}, 'Something went wrong'), errorBox(err)) };
  }
  if (mine !== generation) { // a newer navigation won
    if (content.dispose) content.dispose();
    return;
  }
  if (current && current.dispose) current.dispose();
  current = content;
  // Keep focus on the control that changed the view, else announce the new page.
  const focusedId = document.activeElement && main.contains(document.activeElement) ? document.activeElement.id : null;
  main.replaceChildren(content.node);
  performance.mark('kaas:rendered');
  document.title = `${content.title} · kaas`;
  const again = focusedId && document.getElementById(focusedId);
  if (again && view === lastView) again.focus();
  else if (lastView !== null) main.focus();
  lastView = view;
  if (content.after) content.after();
  main.dataset.view = view || 'home';
  main.dataset.ready = `${performance.timeOrigin}:${mine}`; // unique per render, for tests
}

addEventListener('hashchange', render);
document.getElementById('skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  document.getElementById('main').focus();
});
render();
