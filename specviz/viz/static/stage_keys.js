// specviz stage, keys: the arrow keys step the stage on every page (the glue adds its own: P, F).
//
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
