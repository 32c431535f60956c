// specviz stage, Streamlit glue (components v2). Streamlit calls the default export whenever the
// data changes, with the same parentElement: the stage is built once per element and updated after.
// The page's own Next phase / Next cycle / Back buttons stay the server path (and what a test
// harness without JavaScript clicks); this glue answers their clicks and the arrow keys locally
// whenever the step is already here, so the server is asked only for what the browser lacks.

const SV_STAGES = new WeakMap();
const SV_BUTTONS = {next_phase: 'next', next_cycle: 'nextCycle', back: 'back'};

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let entry = SV_STAGES.get(parentElement);
  if (!entry) {
    const root = document.createElement('div');
    parentElement.appendChild(root);
    const stage = createStage(root, {send: value => setTriggerValue('event', value)});
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
    entry = {stage, onKey, onClick, root};
    SV_STAGES.set(parentElement, entry);
    window.__specvizStage = stage;  // for the browser test and the latency bench
  }
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
