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
const SV_BUTTONS = {next_phase: 'next', next_cycle: 'nextCycle', back: 'back'};

const SV_SEND_GAP_MS = 80;  // between two trigger values: two set in one moment travel as one

// The component's trigger: a message starts a run of the stage fragment. Messages leave at least
// SV_SEND_GAP_MS apart (a report and a prefetch both wait for the same motion to end).
function svTrigger(entry, value) {
  const now = performance.now(), at = Math.max(now, entry.nextSendAt || 0);
  entry.nextSendAt = at + SV_SEND_GAP_MS;
  if (at <= now) entry.trigger('event', value);
  else setTimeout(() => entry.trigger('event', value), at - now);
}

function svSend(entry, value) {
  const page = () => svTrigger(entry, value);
  const data = entry.stage.state.data, url = data && data.route, token = data && data.channel;
  if (!url || entry.deadRoute === token || value.pause || (value.kind !== 'prefetch' && data.follow)) {
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

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let entry = SV_STAGES.get(parentElement);
  if (!entry) {
    const root = document.createElement('div');
    parentElement.appendChild(root);
    // `entry` is set below, before the stage can send anything.
    const stage = createStage(root, {send: value => svSend(entry, value)});
    const onKey = stageKeys(stage);
    // Capture phase on window: runs before Streamlit's own handlers, which then never see the event.
    const onClick = e => {
      const host = e.target && e.target.closest && e.target.closest('.st-key-next_phase, .st-key-next_cycle, .st-key-back');
      if (!host || !stage.state.data) return;
      const name = Object.keys(SV_BUTTONS).find(k => host.classList.contains('st-key-' + k));
      e.preventDefault();
      e.stopImmediatePropagation();
      stage[SV_BUTTONS[name]]();
    };
    window.addEventListener('keydown', onKey, true);
    window.addEventListener('click', onClick, true);
    entry = {stage, onKey, onClick, root, deadRoute: null};
    SV_STAGES.set(parentElement, entry);
    window.__specvizStage = stage;  // for the browser test and the latency bench
  }
  entry.trigger = setTriggerValue;
  entry.stage.update(data);
  // Streamlit may call a cleanup while the element is still mounted: a call whose module import was
  // still pending when the next data came is cleaned up as soon as it resolves (seen under load: the
  // stage lost its listeners and a second stage was built beside the dead one). The stage is taken
  // down only once its element has left the page.
  return () => setTimeout(() => {
    if (parentElement.isConnected || SV_STAGES.get(parentElement) !== entry) return;
    window.removeEventListener('keydown', entry.onKey, true);
    window.removeEventListener('click', entry.onClick, true);
    entry.stage.destroy();
    entry.root.remove();
    SV_STAGES.delete(parentElement);
  }, 0);
}
