// specviz stage, motion: one step's picture patched into the next (morphdom, nodes matched by their
// data-key), so the nodes that persist run CSS transitions on their state classes, new keyed nodes
// fade in, a node whose background changed cross-fades from the old one, and nodes that moved glide
// from where they were (FLIP with the Web Animations API). Reduced motion turns all of it off.

const MOVE_MS = 340;
const ENTER_MS = 280;

function svKey(node) {
  return node.nodeType === 1 ? node.getAttribute('data-key') || undefined : undefined;
}

function reducedMotion() {
  return !!(window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches);
}

// FLIP: First (rects before the patch), Last (after), Invert and Play (a transform animation from
// the old place to none). A keyed node inside a keyed node that moved the same way does not move on
// its own: only the difference to its keyed ancestor is animated.
// A node not drawn (display: none: lecture mode leaves out what a phase does not teach) has no place
// to glide from or to: it just appears or goes.
const drawn = r => r.width > 0 || r.height > 0;

function measure(root) {
  const rects = new Map();
  root.querySelectorAll('[data-key]').forEach(el => {
    const r = el.getBoundingClientRect();
    if (drawn(r)) rects.set(el, r);
  });
  return rects;
}

function flip(root, before) {
  if (reducedMotion()) return 0;
  const moved = new Map();
  before.forEach((r0, el) => {
    if (!el.isConnected || !root.contains(el)) return;
    const r1 = el.getBoundingClientRect();
    if (!drawn(r1)) return;
    const dx = r0.left - r1.left, dy = r0.top - r1.top;
    if (Math.abs(dx) >= 1 || Math.abs(dy) >= 1) moved.set(el, [dx, dy]);
  });
  let n = 0;
  moved.forEach(([dx, dy], el) => {
    const up = el.parentElement && el.parentElement.closest('[data-key]');
    const carried = up && moved.get(up);
    const ox = carried ? dx - carried[0] : dx, oy = carried ? dy - carried[1] : dy;
    if (Math.abs(ox) < 1 && Math.abs(oy) < 1) return;
    el.animate([{transform: `translate(${ox}px, ${oy}px)`}, {transform: 'none'}],
      {duration: MOVE_MS, easing: 'cubic-bezier(.2,.8,.3,1)'});
    n += 1;
  });
  return n;
}

function enter(el) {
  if (reducedMotion() || !el.animate) return;
  el.animate([{opacity: 0, transform: 'scale(.6)'}, {opacity: 1, transform: 'none'}],
    {duration: ENTER_MS, easing: 'cubic-bezier(.2,.8,.3,1)'});
}

// A keyed node whose state (class) changed cross-fades from its old background to its new one: the
// new colour is set at once, and a layer under its content, painted in the old colour, runs its
// opacity to 0 (a CSS transition, stage.css `.svs-fade`). The result looks like a background-color
// transition, but opacity runs on the compositor: no repaint per frame, which is most of what a
// colour transition costs a software-rendered browser (a classroom's laptops, or eight headless
// pages on one server).
function fadeFrom(changed) {
  if (!changed.length || reducedMotion()) return;
  changed.forEach(([el, was]) => {
    el.style.setProperty('--svs-was', was);
    el.classList.add('svs-fade', 'svs-fade-start');
  });
  getComputedStyle(changed[0][0], '::before').opacity;  // the start state is rendered first
  changed.forEach(([el]) => {
    el.classList.remove('svs-fade-start');
    // Done, the node stops being its own stacking context (a hovered token may overflow it again);
    // unless a later step started a new fade on it (the old one's cancel event comes after that).
    const fade = el.svsFade = (el.svsFade || 0) + 1;
    const done = e => {
      if (e.pseudoElement !== '::before') return;
      el.removeEventListener('transitionend', done);
      el.removeEventListener('transitioncancel', done);
      if (el.svsFade === fade) el.classList.remove('svs-fade');
    };
    el.addEventListener('transitionend', done);
    el.addEventListener('transitioncancel', done);
  });
}

// A node that draws its own ::before (the tree's edges) or transitions its own background keeps it.
function fadable(el, seen) {
  // Cells of one kind share the answer (it is asked of dozens of nodes per step, each a style read).
  const kind = el.tagName + '.' + el.getAttribute('class');
  if (!seen.has(kind)) seen.set(kind, fadableNow(el));
  return seen.get(kind);
}

function fadableNow(el) {
  const cs = getComputedStyle(el), layer = getComputedStyle(el, '::before');
  const durations = cs.transitionDuration.split(',');
  const own = cs.transitionProperty.split(',').some(
    (p, i) => /background|all/.test(p) && parseFloat(durations[i % durations.length]) > 0);
  return (layer.content === 'none' || el.classList.contains('svs-fade')) && !own;
}

// One picture slot: the first fill is a plain insert; later fills patch the nodes in place.
function patch(slot, html) {
  if (!slot.firstElementChild || !html) {
    slot.innerHTML = html || '';
    return;
  }
  const holder = document.createElement('div');
  holder.innerHTML = html;
  const changed = [], motion = !reducedMotion(), seen = new Map(), added = new Set();
  morphdom(slot, holder, {
    childrenOnly: true,
    getNodeKey: svKey,
    // A new keyed node fades in; the keyed nodes inside it come with it (a new cache row is one
    // animation, not one per slot: dozens of them at once cost a software-rendered page frames).
    onNodeAdded(node) {
      if (node.nodeType === 1 && node.hasAttribute('data-key')) {
        const up = node.parentElement && node.parentElement.closest('[data-key]');
        if (!up || !added.has(up)) enter(node);
        added.add(node);
      }
      return node;
    },
    // Focus stays where the keyboard left it: an element that has focus keeps its attributes.
    onBeforeElUpdated(from, to) {
      if (from.isEqualNode(to)) return false;
      if (motion && from.hasAttribute('data-key') && from.getAttribute('class') !== to.getAttribute('class') &&
          fadable(from, seen)) {
        changed.push([from, getComputedStyle(from).backgroundColor]);
      }
      return true;
    },
  });
  fadeFrom(changed.filter(([el, was]) => el.isConnected && getComputedStyle(el).backgroundColor !== was));
}
