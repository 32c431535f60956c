// specviz stage, painting: the stage's frame and a step's parts drawn into it.
//
// A step's parts are declared once, on the server (specviz/viz/stage_data.py `PARTS`), and come here
// as `SV_PARTS` (specviz/viz/stage_js.py `parts_js`): per part its key in a step's data, its region
// (`pics`: the picture column; `side`: the narrative's column beside it, under the phase's heading;
// `foot`: under both), whether it is patched in place by key (`patch`, the pictures) or replaced when
// it changed, how many slots a list of it fills (`many`), and whether it is heavy (sent once per
// signature) or light (made afresh for every payload: the status line). Painting is generic: a new
// part is drawn by this code as it stands.

// The frame: the guided start, the stage's notes, the regions, and one slot per part (a list part:
// `many` slots, the second and later ones hidden while empty, stage.css).
function stageFrame(root) {
  root.classList.add('svs');
  root.innerHTML = (
    "<section class='svs-intro' aria-label='Getting started' hidden><div class='svs-intro-text'></div>" +
    "<button type='button' class='svs-intro-ok'>Got it — hide this</button></section>" +
    "<div class='svs-notice' role='status' aria-live='polite'></div>" +
    "<div class='svs-body'><div class='svs-pics'></div>" +
    "<aside class='svs-side'><div class='svs-heading' data-role='phase'></div></aside></div>"
  );
  const regions = {pics: root.querySelector('.svs-pics'), side: root.querySelector('.svs-side'), foot: root};
  const slots = new Map();
  for (const part of SV_PARTS) slots.set(part.name, partSlots(part, regions[part.region] || root));
  return {
    intro: root.querySelector('.svs-intro'),
    notice: root.querySelector('.svs-notice'),
    heading: root.querySelector('.svs-heading'),  // the phase, over the narrative (lecture mode: stage.css)
    slots,
  };
}

function partSlots(part, region) {
  return Array.from({length: Math.max(1, part.many)}, (_, i) => {
    const slot = document.createElement('div');
    slot.className = part.css + (i ? ` ${part.css}-${i + 1}` : '');
    slot.dataset.part = part.name;
    for (const [name, value] of Object.entries(part.attrs)) slot.setAttribute(name, value);
    region.appendChild(slot);
    return slot;
  });
}

// One part of a step into its slots: patched by key (motion), or replaced when it changed.
function paintPart(st, part, value) {
  const items = part.many ? (value || []) : [value];
  st.el.slots.get(part.name).forEach((slot, i) => {
    const html = items[i] || '';
    if (part.patch) patch(slot, html);
    else if (slot.svsHtml !== html) {
      slot.innerHTML = html;
      slot.svsHtml = html;
    }
  });
}

function render(st, step) {
  const {root, el, s} = st;
  const d = s.data.steps[String(step)];
  root.classList.toggle('svs-lecture', !!s.data.lecture);
  s.shown = d;
  const rects = measure(root);
  root.classList.toggle('svs-compare', SV_PARTS.some(p => p.many && (d[p.name] || []).length > 1));
  SV_PARTS.forEach(p => { if (p.patch) paintPart(st, p, d[p.name]); });
  fitTree(root);
  el.heading.textContent = d.title;
  SV_PARTS.forEach(p => { if (!p.patch) paintPart(st, p, d[p.name]); });
  root.dataset.step = String(step);
  root.dataset.title = d.title;
  flip(root, rects);
  s.cur = step;
  s.painted += 1;
  if (st.hooks.shown) st.hooks.shown(step, d);
}

function samePart(a, b, part) {
  const x = a[part.name], y = b[part.name];
  return Array.isArray(x) && Array.isArray(y) ? x.join('\u0000') === y.join('\u0000') : x === y;
}

// The shown step in newer data: when only its light parts changed (one more cycle computed: the
// status line), they are patched and the picture left as it is; otherwise it is drawn again (lecture
// mode, a compared layout).
function repaint(st, d) {
  const {s} = st;
  if (s.shown && s.shown.title === d.title && SV_PARTS.every(p => !p.heavy || samePart(s.shown, d, p))) {
    SV_PARTS.forEach(p => { if (!p.heavy) paintPart(st, p, d[p.name]); });
    s.shown = d;
  } else {
    render(st, s.cur);
  }
}

// A first screen for someone alone: shown until dismissed, and remembered in this browser.
const INTRO_KEY = 'specviz.intro.dismissed';
function introDismissed() {
  try { return window.localStorage.getItem(INTRO_KEY) === '1'; } catch (e) { return false; }
}

function introButton(el) {
  el.intro.querySelector('.svs-intro-ok').addEventListener('click', () => {
    try { window.localStorage.setItem(INTRO_KEY, '1'); } catch (e) { /* private mode: hidden for now */ }
    el.intro.hidden = true;
  });
}

function intro(st, html) {
  const box = st.el.intro, show = !!html && !introDismissed();
  if (show && box.dataset.html !== html) {
    box.querySelector('.svs-intro-text').innerHTML = html;
    box.dataset.html = html;
  }
  box.hidden = !show;
}

function say(st, text) {
  st.el.notice.textContent = text || '';
  st.el.notice.hidden = !text;
}

// Lecture mode fits a token tree's panel to the screen (docs/design.md §3, "One screen in lecture
// mode"): every size in it is in em (tree.css), so one font size scales it as a whole. Measured at its
// own size after each patch (the patch drops the last step's fit), before FLIP measures where the
// nodes went. Below FIT_MIN a big tree scrolls inside its panel instead of shrinking further.
const FIT_MIN = 0.6, FIT_MARGIN_PX = 8;
// A grid's size from its tracks, as laid out: a section fading in (scaled) or gliding (translated)
// would mislead a measure of its boxes.
function gridSize(cs) {
  const sum = (tracks, gap) => {
    const px = tracks.split(' ').map(parseFloat).filter(x => !isNaN(x));
    return px.reduce((a, b) => a + b, 0) + Math.max(0, px.length - 1) * (parseFloat(gap) || 0);
  };
  return [sum(cs.gridTemplateColumns, cs.columnGap), sum(cs.gridTemplateRows, cs.rowGap)];
}

function fitTree(root) {
  const panel = root.querySelector('.svs-pic > .svtree.svtree-lecture');
  if (!panel) return;
  panel.style.fontSize = panel.style.maxHeight = panel.style.overflow = '';
  // From the picture's slot (the panel itself may still sit below the step it replaces), never
  // less than a third of the screen: a negative max-height would be dropped and the tree run on.
  const top = Math.max(0, panel.parentElement.getBoundingClientRect().top);
  const room = [panel.parentElement.clientWidth, Math.max(window.innerHeight / 3, window.innerHeight - top - FIT_MARGIN_PX)];
  const cs = getComputedStyle(panel), base = parseFloat(cs.fontSize);
  let size = base;
  // Borders and gaps are in px and do not scale: a second measure corrects the first guess.
  for (let i = 0; i < 2; i++) {
    const [w, h] = gridSize(cs);
    const scale = Math.min(1, room[0] / w, room[1] / h);
    if (scale >= 1) break;
    size = Math.max(base * FIT_MIN, size * scale * 0.99);
    panel.style.fontSize = size.toFixed(2) + 'px';
    if (size <= base * FIT_MIN) {
      Object.assign(panel.style, {maxHeight: room[1] + 'px', overflow: 'auto'});
      break;
    }
  }
}
