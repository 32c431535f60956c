// specviz stage, Streamlit glue (components v2). Streamlit calls the default export whenever the
// data changes, with the same parentElement: the stage is built once per element and updated after.
// The page's own Next phase / Next cycle / Back buttons stay the server path (and what a test
// harness without JavaScript clicks); this glue answers their clicks and the arrow keys locally
// whenever the step is already here, so the server is asked only for what the browser lacks.
//
// What it must ask goes to the stage's own route when the payload names one (`route`,
// specviz/ui/stage_route.py): a POST answered with the payload itself, applied in place, with no
// script run and no React render of the page. The page's trigger stays the path for what the page
// around the stage must follow (a pause: the history slider; a quiz or open tabs: every step) and
// the fallback whenever the route fails.

const SV_STAGES = new WeakMap();
const SV_BUTTONS = {next_phase: 'next', next_cycle: 'nextCycle', back: 'back', play: 'play'};

const SV_SEND_GAP_MS = 80;  // between two trigger values: two set in one moment travel as one
// A reload's new session takes this page's runs over with their secret (specviz/ui/session.py): the page
// leaves it in this cookie as it goes, for the next page's first moments only, never in its address.
const SV_RESUME = 'specviz_resume';

// The component's trigger: a message starts a run of the stage fragment. Messages leave at least
// SV_SEND_GAP_MS apart (a report and a prefetch both wait for the same motion to end).
function svTrigger(entry, value) {
  entry.own = true;  // the page run this starts is the stage's own (see svHeld)
  const now = performance.now(), at = Math.max(now, entry.nextSendAt || 0);
  entry.nextSendAt = at + SV_SEND_GAP_MS;
  if (at <= now) entry.trigger('event', value);
  else setTimeout(() => entry.trigger('event', value), at - now);
}

function svSend(entry, value) {
  const page = () => svTrigger(entry, value);
  const data = entry.stage.state.data, url = data && data.route, token = data && data.channel;
  // Play and Pause change the page around the stage (the button, the timer): the page's path.
  const paged = value.pause || value.kind === 'play' || (value.kind !== 'prefetch' && data.follow);
  if (!url || entry.deadRoute === token || paged) {
    page();
    return;
  }
  fetch(url, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token, event: value})})
    .then(r => {
      if (r.ok) return r.json();
      if (r.status === 404 || r.status === 405 || r.status === 410) entry.deadRoute = token;  // not for this page
      throw new Error(`the stage route answered ${r.status}`);
    })
    .then(answer => {
      entry.stage.update(answer);
      // The action left something for the page to say (an error, the end of the text): draw it.
      if (answer.redraw) svTrigger(entry, {kind: 'view', run: answer.run, step: entry.stage.state.cur, pause: true});
    })
    .catch(page);
}

// Lecture mode collapses Streamlit's sidebar when it turns on (a projector's 1280 px cannot spare
// 300 of them); Streamlit's own toggle brings it back, and stays the lecturer's choice until lecture
// mode is switched off and on again.
function svLecture(entry, lecture) {
  if (lecture && !entry.lecture) {
    const bar = document.querySelector("section[data-testid='stSidebar']");
    const fold = bar && bar.getAttribute('data-collapsed') !== 'true' &&
      (bar.querySelector("[data-testid='stSidebarCollapseButton'] button") ||
       document.querySelector("button[aria-label='Collapse sidebar']"));
    if (fold) fold.click();
  }
  entry.lecture = lecture;
}

// Whether the page is being drawn again for something other than the stage's own message (a sidebar
// setting, a button of the page, the play timer): Streamlit marks the stage's element stale from the
// moment it asks for the run until the run has drawn the stage again. Clicks then wait for the data
// that run brings (stage_timeline.js `go`).
function svHeld(entry) {
  const box = entry.root.closest('[data-testid="stElementContainer"]');
  return !!box && box.dataset.stale === 'true' && !entry.own;
}

// The history slider is a Streamlit widget below the stage, drawn by whole-page runs for the step the
// server showed then (its key: `history-<run>-<step>-<seq>`). Between those runs the stage steps by
// itself, and the slider's thumb and label named a step no longer shown ("cycle 1 · 5" under cycle
// 2 · 5, for the 4 s until the page is drawn again). They follow the stage: the label and the
// thumb's place show the step on screen (the thumb at the end for a step past the slider's last),
// and the widget's own again on the step it was drawn for. Its next drawing (a drag, a page run)
// replaces both.
function svHistory(step, title) {
  const box = document.querySelector('[class*="st-key-history-"]');
  const input = box && box.querySelector('input[type="range"]');
  const label = box && box.querySelector('[data-testid="stSliderThumbValue"] p');
  const thumb = input && input.parentElement && input.parentElement.parentElement;
  if (!label || !thumb) return;
  const key = [...box.classList].find(c => c.startsWith('st-key-history-'));
  if (!box.svDrawn || box.svDrawn.key !== key) {
    box.svDrawn = {key, step: Number(input.value), text: label.textContent, left: thumb.style.left,
      valuetext: input.getAttribute('aria-valuetext')};
  }
  const drawn = box.svDrawn, max = Number(input.max) || 0;
  const own = step === drawn.step;
  const text = own ? drawn.text : title.charAt(0).toLowerCase() + title.slice(1);
  if (label.textContent !== text) label.textContent = text;
  thumb.style.left = own ? drawn.left : `${max > 0 ? (100 * Math.min(step, max)) / max : 0}%`;
  input.setAttribute('aria-valuetext', own ? drawn.valuetext : text);
}

function svLastStep(entry) {
  const s = entry.stage.state, d = s.data;
  if (d && d.resume) document.cookie = `${SV_RESUME}=${d.resume}; Max-Age=15; Path=/; SameSite=Strict`;
  if (!d || !d.route || s.cur === null || s.cur === s.reported || !navigator.sendBeacon) return;
  navigator.sendBeacon(d.route, JSON.stringify({token: d.channel, event: {kind: 'view', run: s.run, step: s.cur}}));
}

// P, the Play button's shortcut, is taken here as the button's click is (Streamlit's own shortcut
// handler would call the button's server callback, which knows no step the browser took by itself).
function svPlayKey(stage, keys) {
  return e => {
    const plain = !e.defaultPrevented && !e.altKey && !e.ctrlKey && !e.metaKey && !typing(e);
    if (plain && (e.key === 'p' || e.key === 'P') && stage.state.data) {
      e.preventDefault();
      e.stopImmediatePropagation();
      stage.play(!stage.state.data.playing);
      return;
    }
    keys(e);
  };
}

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let entry = SV_STAGES.get(parentElement);
  if (!entry) {
    const root = document.createElement('div');
    parentElement.appendChild(root);
    // `entry` is set below, before the stage can send anything.
    const stage = createStage(root, {
      send: value => svSend(entry, value), held: () => svHeld(entry), shown: (step, d) => svHistory(step, d.title),
    });
    const onKey = svPlayKey(stage, stageKeys(stage));
    // Capture phase on window: runs before Streamlit's own handlers, which then never see the event.
    const onClick = e => {
      const host = e.target && e.target.closest &&
        e.target.closest('.st-key-next_phase, .st-key-next_cycle, .st-key-back, .st-key-play');
      if (!host || !stage.state.data) return;
      const name = Object.keys(SV_BUTTONS).find(k => host.classList.contains('st-key-' + k));
      e.preventDefault();
      e.stopImmediatePropagation();
      // Play and Pause too: the server, which plays, starts (or stops) at the step on screen, not at
      // the last step it was told of (Play within a second of Back skipped the steps in between).
      if (name === 'play') stage.play(!stage.state.data.playing);
      else stage[SV_BUTTONS[name]]();
    };
    // A reload (F5) opens a new session, which takes this page's runs over at the step the server was
    // told of (session.open_workspace): told the step on screen now, if it was not yet. The cookie a
    // reload came with has done its work once this page is up: a later page must not find it.
    const onHide = () => svLastStep(entry);
    document.cookie = `${SV_RESUME}=; Max-Age=0; Path=/; SameSite=Strict`;
    window.addEventListener('keydown', onKey, true);
    window.addEventListener('click', onClick, true);
    window.addEventListener('pagehide', onHide);
    entry = {stage, onKey, onClick, onHide, root, deadRoute: null};
    SV_STAGES.set(parentElement, entry);
    window.__specvizStage = stage;  // for the browser test and the latency bench
  }
  entry.trigger = setTriggerValue;
  entry.own = false;
  entry.stage.update(data);
  // The page drawn around the stage may bring a history slider for another step than the one shown.
  requestAnimationFrame(() => { const s = entry.stage.state; if (s.shown) svHistory(s.cur, s.shown.title); });
  svLecture(entry, !!(data && data.lecture));
  // Streamlit may call a cleanup while the element is still mounted: a call whose module import was
  // still pending when the next data came is cleaned up as soon as it resolves (seen under load: the
  // stage lost its listeners and a second stage was built beside the dead one). The stage is taken
  // down only once its element has left the page.
  return () => setTimeout(() => {
    if (parentElement.isConnected || SV_STAGES.get(parentElement) !== entry) return;
    window.removeEventListener('keydown', entry.onKey, true);
    window.removeEventListener('click', entry.onClick, true);
    window.removeEventListener('pagehide', entry.onHide);
    entry.stage.destroy();
    entry.root.remove();
    SV_STAGES.delete(parentElement);
  }, 0);
}
