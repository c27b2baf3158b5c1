// One request: its attributes, the trace waterfall (gateway → engine → …), the token timeline
// when token events exist, and the engine metrics of its worker at that moment.

import { h } from './api.js';

export async function requestPage(ctx) {
  ctx.el.append(h('h1', {}, 'Request'), h('p', { class: 'empty' }, 'Not built yet.'));
}
