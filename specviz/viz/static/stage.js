// specviz stage: a run's phases stepped in the browser (specviz/viz/stage_js.py builds the module).
//
// The server sends the steps it knows (the shown cycle's phases, the cycle before's last one and,
// once computed, the next cycle's) as data: per step the KV picture's HTML, the status line, the
// narrative and the token strip. Stepping to a known step is local: the picture is *patched* (morphdom,
// nodes matched by their data-key) instead of replaced, so the nodes that persist run CSS
// transitions on their state classes, and nodes that moved glide from where they were (FLIP with the
// Web Animations API). Only a step the browser does not have goes to the server; clicks that arrive
// meanwhile are queued and shown as such, never dropped.
//
// A step's heavy part (pictures, narrative, strip) travels once: the app's payload carries the bodies
// the browser does not hold, deflated (`bodies`, specviz/viz/stage_data.py `pack`), and every message
// back says which it holds (`have`). The standalone page's data has every step whole.
//
// `createStage(root, hooks)` is the shared core: the Streamlit component (app glue, below it in the
// module) and the standalone run page (standalone glue) both call it, so they cannot drift.

const PHASES = 5;  // steps per cycle: draft, verify, accept, resolve, rollback
const MOVE_MS = 340;
const ENTER_MS = 280;
const REPORT_IDLE_MS = 1200;  // a pause this long after local steps tells the server where we are
const PAGE_IDLE_MS = 4000;  // ... and this long, the page around the stage is drawn again (`pauseLater`)
const RESEND_MS = 4000;  // a request not answered by then is sent again (then after 8 s, 16 s, ...)
const MOUNT = Math.random().toString(36).slice(2, 10);  // this page's requests, told from another's
const HOLD = 48;  // step bodies kept (a few cycles); the ones the current data names are never dropped

// base64 of zlib-deflated JSON -> the object. Synchronous (fflate, see stage_js.py): the browser's
// DecompressionStream yields between its steps, and on a busy page every hop waited its turn.
function inflate(b64) {
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(svFflate.unzlibSync(bytes)));
}

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

function createStage(root, hooks) {
  root.classList.add('svs');
  root.innerHTML = (
    "<section class='svs-intro' aria-label='Getting started' hidden><div class='svs-intro-text'></div>" +
    "<button type='button' class='svs-intro-ok'>Got it — hide this</button></section>" +
    "<div class='svs-notice' role='status' aria-live='polite'></div>" +
    "<div class='svs-body'>" +
    "<div class='svs-pics'><div class='svs-pic' data-pic='0'></div><div class='svs-pic svs-pic-2' data-pic='1'></div></div>" +
    "<aside class='svs-side'><div class='svs-heading' data-role='phase'></div><div class='svs-status'></div>" +
    "<div class='svs-story' data-role='narrative' aria-live='polite'></div></aside></div>" +
    "<div class='svs-strip'></div>"
  );
  const el = {
    intro: root.querySelector('.svs-intro'),
    notice: root.querySelector('.svs-notice'),
    pics: [...root.querySelectorAll('.svs-pic')],
    heading: root.querySelector('.svs-heading'),  // the phase, over the narrative (lecture mode: stage.css)
    status: root.querySelector('.svs-status'),
    story: root.querySelector('.svs-story'),
    strip: root.querySelector('.svs-strip'),
  };
  const s = {
    data: null, cur: null, run: null, seq: null, queue: [], waiting: false, held: null,
    reportTimer: null, reported: null, pausing: false, pauseTimer: null, pausedAt: null, painted: 0, prefetched: null, shown: null,
    req: 0, pending: null, awaited: null, superseded: null, resendTimer: null, log: [], deferred: [], holdTimer: null,
    bodies: new Map(), raw: null, timings: [], received: {payloads: 0, steps: 0, bodies: 0, again: 0},  // held bodies; the last payload
  };

  const refit = () => fitTree(root);  // a projector's screen replacing a laptop's
  window.addEventListener('resize', refit);

  function cycleOf(step) { return step === 0 ? -1 : Math.floor((step - 1) / PHASES); }
  function known(step) { return !!(s.data && s.data.steps[String(step)]); }

  function sameStep(a, b) {
    return !!a && !!b && a.title === b.title && a.status === b.status && a.story === b.story &&
      a.strip === b.strip && a.kv.join('\u0000') === b.kv.join('\u0000');
  }

  function render(step) {
    const d = s.data.steps[String(step)];
    root.classList.toggle('svs-lecture', !!s.data.lecture);
    s.shown = d;
    const rects = measure(root);
    const kv = d.kv || [];
    root.classList.toggle('svs-compare', kv.length > 1);
    el.pics.forEach((slot, i) => patch(slot, kv[i] || ''));
    fitTree(root);
    el.heading.textContent = d.title;
    el.status.innerHTML = d.status;
    el.story.innerHTML = d.story;
    if (el.strip.dataset.html !== d.strip) { el.strip.innerHTML = d.strip; el.strip.dataset.html = d.strip; }
    root.dataset.step = String(step);
    root.dataset.title = d.title;
    flip(root, rects);
    s.cur = step;
    s.painted += 1;
    if (hooks.shown) hooks.shown(step, d);
  }

  // A first screen for someone alone: shown until dismissed, and remembered in this browser.
  const INTRO_KEY = 'specviz.intro.dismissed';
  function introDismissed() {
    try { return window.localStorage.getItem(INTRO_KEY) === '1'; } catch (e) { return false; }
  }
  el.intro.querySelector('.svs-intro-ok').addEventListener('click', () => {
    try { window.localStorage.setItem(INTRO_KEY, '1'); } catch (e) { /* private mode: hidden for now */ }
    el.intro.hidden = true;
  });
  function intro(html) {
    const show = !!html && !introDismissed();
    if (show && el.intro.dataset.html !== html) {
      el.intro.querySelector('.svs-intro-text').innerHTML = html;
      el.intro.dataset.html = html;
    }
    el.intro.hidden = !show;
  }

  function say(text) {
    el.notice.textContent = text || '';
    el.notice.hidden = !text;
  }

  // Step bodies by signature, least recently used first (a Map keeps insertion order).
  const held = s.bodies;
  // The last messages both ways, stamped (ms since the page opened), for the tests (and anyone
  // debugging the stage in a console).
  function note(entry) { s.log.push([Math.round(performance.now()), ...entry]); if (s.log.length > 80) s.log.shift(); }

  // The glue carries each message (the app's: the stage's route, or the component's trigger).
  function send(kind, extra) {
    note(['sent', kind, s.cur, extra && extra.target, extra && extra.req]);
    if (!hooks.send) return;
    // `sent` orders the messages on the server: the route's calls can overtake each other there. The
    // page's own monotonic clock, not the wall clock, which may step back (stage_protocol.in_order).
    hooks.send(Object.assign({kind, step: s.cur, run: s.run, seq: s.seq, have: [...held.keys()].map(Number),
                              sent: performance.now()}, extra || {}));
  }

  function report(kind, extra) {
    if (!hooks.send) return;
    clearTimeout(s.reportTimer);
    s.reported = s.cur;
    send(kind, extra);
  }

  // A packed payload's steps made whole from the bodies it brings and the ones held. A step whose
  // body is in neither (a remounted stage starts empty) is left out: the browser lacks it and asks
  // for it like any step it lacks, and the answer brings it (the shown step's body always comes).
  function unpack(data) {
    if (data.bodies === undefined) return data;  // whole steps (the standalone page)
    // Deflated in a component's data; a plain object in the route's answer (gzipped over HTTP).
    const bodies = typeof data.bodies === 'string' ? (data.bodies ? inflate(data.bodies) : {}) : data.bodies;
    s.raw = data;
    const got = s.received;  // totals over the payloads so far
    s.received = {payloads: got.payloads + 1, steps: got.steps + Object.keys(data.steps).length,
                  bodies: got.bodies + Object.keys(bodies).length,
                  again: got.again + Object.keys(bodies).filter(sig => held.has(sig)).length};
    for (const [sig, body] of Object.entries(bodies)) held.set(sig, body);
    const steps = {};
    for (const [k, head] of Object.entries(data.steps)) {
      const sig = String(head.sig), body = held.get(sig);
      if (!body) continue;
      held.delete(sig); held.set(sig, body);  // recently used
      steps[k] = Object.assign({}, head, body);
    }
    const named = new Set(Object.values(data.steps).map(h => String(h.sig)));
    for (const sig of held.keys()) {
      if (held.size <= HOLD) break;
      if (!named.has(sig)) held.delete(sig);
    }
    return Object.assign({}, data, {steps});
  }

  // Local stepping; `ask` is what the server is asked when the step is not here.
  function go(target, kind) {
    note(['go', kind, s.cur, target, s.waiting]);
    if (s.waiting) {  // a request is out: this click waits its turn, visibly
      s.queue.push(kind);
      say(`Computing on the server… ${s.queue.length} click${s.queue.length > 1 ? 's' : ''} queued.`);
      return;
    }
    // The page is being drawn again for a change made elsewhere (a setting in the sidebar: maybe a
    // new run, or new settings that the cycles in hand were not computed under): the click waits for
    // the page's new data and is then carried out on it. Stepped at once, it stepped the old run,
    // and the new run's first payload then undid it (ten Next cycle clicks after a proposer change
    // ended at cycle 9).
    if (hooks.held && hooks.held()) {
      s.deferred.push([kind, target]);
      say(`Waiting for the page… ${s.deferred.length} click${s.deferred.length > 1 ? 's' : ''} queued.`);
      clearInterval(s.holdTimer);
      s.holdTimer = setInterval(release, 100);
      return;
    }
    target = Math.max(0, target);
    if (s.data.quiz && kind !== 'back' && s.data.quiz.includes(s.cur) && s.held !== s.cur && target > s.cur) {
      s.held = s.cur;  // a pending question: the first Next says so, the second skips it
      say('A quiz question is waiting beside this picture: answer it, or press Next again to skip it.');
      return;
    }
    if (known(target)) {
      const before = cycleOf(s.cur);
      render(target);
      say(s.held === null || s.held === target ? '' : 'Quiz question skipped.');
      if (s.held !== null && s.held !== target) s.held = null;
      pauseLater();
      clearTimeout(s.reportTimer);
      if (s.cur === s.reported) return;
      // At the edge of what the browser has (the next click would wait for the server), in a new
      // cycle (the server adopts it and computes one more) or at a phase that the tabs or the quiz
      // below follow: say where we are the moment the step's motion has run, if the browser is
      // still there. Not sooner: on a machine that also computes, the script run and its payload
      // landing mid-motion cost frames. (A click that comes meanwhile and needs the server asks at
      // once: `request`.) Otherwise after a pause, so Play, Reset and the history start from the
      // step on screen.
      const soon = atEdge(target) || (cycleOf(target) !== before && target > 0 && kind !== 'back') || s.data.follow;
      // Never while a request is out (see the prefetch below): the request tells the server the step.
      const due = () => !s.waiting && s.cur === target && s.cur !== s.reported;
      // A live lecture's room follows the lecturer's every step: told at once (through the route,
      // no script run), so the students' pages move with the lecturer's (ui/live.py).
      if (s.data.live) report('view');
      else if (soon) whenStill(() => { if (due()) report('view'); });
      else s.reportTimer = setTimeout(() => { if (due()) report('view'); }, REPORT_IDLE_MS);
      return;
    }
    if (kind !== 'back' && !s.data.more) {
      say(s.data.end || 'Nothing more to show.');
      return;
    }
    s.waiting = true;
    s.awaited = target;
    const c = cycleOf(target) + 1;
    say(kind === 'back' ? 'Fetching the earlier step from the server…' : `Computing cycle ${c} on the server…`);
    root.classList.add('svs-busy');
    request(kind, {target});
  }

  // The clicks that waited for the page (`hooks.held`), on the data it brought.
  function release() {
    if (!s.deferred.length || s.waiting || (hooks.held && hooks.held())) return;
    clearInterval(s.holdTimer);
    const clicks = s.deferred;
    s.deferred = [];
    say('');
    for (const [kind, target] of clicks) {
      if (kind === 'seek') api.seek(target);
      else api[{next_phase: 'next', next_cycle: 'nextCycle', back: 'back'}[kind]]();
    }
  }

  // A request carries an id that the server echoes in the payload that answers it (`answered`). A
  // trigger value can be lost on its way (two sent in one moment travel as one), and a lost request
  // would leave the stage waiting for ever: it is sent again, with the same id, until answered. The
  // server's steps are idempotent (move to the browser's step, then step), so a request that did
  // arrive twice changes nothing.
  function request(kind, extra) {
    s.req += 1;
    const id = `${MOUNT}:${s.req}`, message = Object.assign({req: id}, extra);
    report(kind, message);
    let wait = RESEND_MS;
    const again = () => {
      if (!s.waiting || s.pending !== id) return;
      send(kind, message);
      wait = Math.min(2 * wait, 30000);
      s.resendTimer = setTimeout(again, wait);
    };
    s.pending = id;
    clearTimeout(s.resendTimer);
    s.resendTimer = setTimeout(again, wait);
  }

  // Once stepping has stopped on a step for a while (someone reads, or reaches for the history),
  // the server draws the page around the stage again for it (a report with `pause`; once per step):
  // the history slider, which the payloads' fragment runs leave as it was. Not at every short
  // pause: a whole-page run costs the browser several times a payload's redraw, and on a busy
  // classroom server (bench.load) clicks often come more than a second apart. A payload drawn with
  // the whole page (`page`) already did it for its step.
  function pauseLater() {
    clearTimeout(s.pauseTimer);
    const at = s.cur;
    s.pauseTimer = setTimeout(() => {
      if (s.waiting || s.cur !== at || s.pausedAt === at) return;
      s.pausedAt = at;
      report('view', {pause: true});
    }, PAGE_IDLE_MS);
  }

  // `fn` once the picture's motion (FLIP glides, fade-ins, cross-fades) has run. Asked a frame on:
  // a cross-fade is a CSS transition, which exists only once the next style update has run.
  function whenStill(fn) {
    requestAnimationFrame(() => {
      const running = root.getAnimations ? root.getAnimations({subtree: true}) : [];
      Promise.all(running.map(a => a.finished.catch(() => null))).then(fn);
    });
  }

  function atEdge(step = s.cur) { return !known(step + 1) && !!s.data.more; }

  function nextCycleTarget(step) {
    return step % PHASES === 0 ? step + PHASES : Math.ceil(step / PHASES) * PHASES;
  }

  const api = {
    next() { if (s.data) go(s.cur + 1, 'next_phase'); },
    nextCycle() { if (s.data) go(nextCycleTarget(s.cur), 'next_cycle'); },
    back() { if (s.data && s.cur > 0) go(s.cur - 1, 'back'); },
    seek(step) { if (s.data) go(step, 'seek'); },
    // Play (on) or Pause: the server plays, from the step shown here (a report with what to do).
    // From Pause until the server says it stopped, a step it made on its timer before it heard of the
    // pause (a payload built while playing) is not followed: it was on its way when the lecturer
    // paused, and the pause's own answer would move the page back (4 → 5 → 4).
    play(on) {
      if (!s.data || s.cur === null) return;
      s.pausing = !on;
      report('play', {on: !!on});
    },
    get state() { return s; },
    // A payload is unpacked (inflated) and taken at once, in the call that brings it: nothing
    // waits for a later task, and payloads are taken in the order they come.
    update(data) {
      const arrived = performance.timeOrigin + performance.now();
      // Built before one already taken (the page's script run and the route can cross): stale.
      if (s.data && data.channel === s.data.channel && data.version < s.data.version) {
        note(['stale', data.version, s.data.version]);
        return;
      }
      try {
        const got = unpack(data);
        const unpacked = performance.timeOrigin + performance.now();
        absorb(got);
        timed(got, arrived, unpacked);
      } catch (err) {
        say(`The stage could not read the server's data: ${err}`);
      }
    },
    destroy() {
      clearTimeout(s.reportTimer); clearTimeout(s.pauseTimer); clearTimeout(s.resendTimer); clearInterval(s.holdTimer);
      window.removeEventListener('resize', refit);
    },
  };

  // Where a round trip's time went (the latency bench reads it): the server's stamps (`served`:
  // its callback, the payload's building), then the payload's arrival here and its render.
  function timed(data, arrived, unpacked) {
    if (!data.served) return;
    s.timings.push(Object.assign({arrived, unpacked, done: performance.timeOrigin + performance.now()}, data.served));
    if (s.timings.length > 40) s.timings.shift();
  }

  function absorb(data) {
    note(['got', data.seq, data.view, data.answered, s.cur, s.waiting, s.queue.length]);
    if (s.pausing && data.run === s.run) {
      if (data.playing) { note(['played-after-pause', data.seq, data.view]); return; }
      s.pausing = false;
    }
    intro(data.intro);
    if (data.page) s.pausedAt = data.view;  // the whole page was drawn for the server's step
    const answered = s.waiting && !!s.pending && data.answered === s.pending;
    // The answer to a request this page stopped waiting for (an earlier payload brought the step):
    // the server now stands where the browser went then; take its sequence number, do not follow it.
    const late = !!s.superseded && data.answered === s.superseded && data.run === s.run;
    if (late) {
      s.superseded = null;
      s.seq = data.seq;
    }
    const fresh = s.data === null || data.run !== s.run || data.seq !== s.seq || answered;
    // A payload that brings the step a click waits for, before the request's own answer (the
    // server computed it in advance, e.g. the prefetch a report started): show it now.
    const arrived = !fresh && s.waiting && data.run === s.run && s.awaited !== null && !!data.steps[String(s.awaited)];
    s.data = data;
    // The server moved (a new run, its own step, an answered request): follow it. Or the step a
    // click waits for came: show it.
    if (fresh || arrived) {
      if (fresh) {
        s.run = data.run;
        s.seq = data.seq;
        s.reported = data.view;
      } else {
        s.superseded = s.pending;
      }
      const hadRequest = s.waiting;
      s.waiting = false;
      s.pending = null;
      clearTimeout(s.resendTimer);
      root.classList.remove('svs-busy');
      const first = Object.keys(data.steps)[0];
      const show = arrived ? s.awaited : known(data.view) ? data.view : first !== undefined ? Number(first) : null;
      s.awaited = null;
      if (show !== null) {
        render(show);
        pauseLater();
      }
      say(data.notice || '');
      if (hadRequest || s.queue.length) {
        const queued = s.queue;
        s.queue = [];
        for (let i = 0; i < queued.length; i++) {
          api[{next_phase: 'next', next_cycle: 'nextCycle', back: 'back'}[queued[i]]]();
          if (s.waiting) { s.queue.push(...queued.slice(i + 1)); break; }  // the rest wait for this answer
        }
      }
    } else if (known(s.cur)) {
      const d = data.steps[String(s.cur)];
      if (sameStep(Object.assign({}, s.shown, {status: d.status}), d)) {
        if (d.status !== s.shown.status) el.status.innerHTML = d.status;  // e.g. one more cycle computed
        s.shown = d;
      } else {
        render(s.cur);  // the same step drawn otherwise (lecture mode, a compared layout): patch it
      }
    }
    // The next cycle, asked for as soon as this one is on screen (once per state of the run).
    const mark = `${data.run}:${Object.keys(data.steps).pop()}`;
    if (data.prefetch && !s.waiting && s.prefetched !== mark) {
      s.prefetched = mark;  // after the motion of the step just shown (the script run costs frames),
      whenStill(() => {
        // Not while a request is out: its script run would be cut short by this one, and the asked
        // step would come only after this cycle's compute too. The answer's payload asks again.
        if (s.waiting) s.prefetched = null;
        else send('prefetch');
      });
    }
  }
  return api;
}

// Keyboard: → next phase, Shift+→ next cycle, ← back, wherever the focus is, except where the
// arrows already mean something: a text field (the caret), a select, a slider (its value).
const SV_TEXT_INPUTS = ['text', 'search', 'number', 'email', 'password', 'url', 'tel', 'range'];
function typing(e) {
  const t = e.composedPath ? e.composedPath()[0] : e.target;
  if (!t || !t.tagName) return false;
  const tag = t.tagName.toLowerCase();
  if (tag === 'input') return SV_TEXT_INPUTS.includes((t.type || 'text').toLowerCase());
  const role = t.getAttribute && t.getAttribute('role');
  return tag === 'textarea' || tag === 'select' || t.isContentEditable || role === 'slider' || role === 'combobox';
}

function stageKeys(stage) {
  return e => {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || typing(e)) return;
    let act = null;
    if (e.key === 'ArrowRight') act = e.shiftKey ? stage.nextCycle : stage.next;
    else if (e.key === 'ArrowLeft' && !e.shiftKey) act = stage.back;
    if (!act) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    act();
  };
}
