// specviz token-tree panel (viz/tree_view.py): linked highlight. Pointing at a node -- or tabbing
// to it -- outlines the same node everywhere in its panel: its box in the tree, its row and column
// of the mask, its K/V cell. One delegated listener on the document (the panel is patched in place
// step after step, so listeners on its nodes would have to be re-attached). No motion: the glides
// of the compaction are the stage's FLIP pass (stage_motion.js), which honours reduced motion.

function svTreeLight(e, on) {
  const t = e.target && e.target.closest ? e.target.closest('.svtree [data-n]') : null;
  if (!t) return;
  const panel = t.closest('.svtree');
  panel.querySelectorAll('.svtree-lit').forEach(el => el.classList.remove('svtree-lit'));
  if (on) panel.querySelectorAll(`[data-n="${t.dataset.n}"]`).forEach(el => el.classList.add('svtree-lit'));
}

if (!window.__svTreeLinked) {
  window.__svTreeLinked = true;
  document.addEventListener('pointerover', e => svTreeLight(e, true));
  document.addEventListener('pointerout', e => svTreeLight(e, false));
  document.addEventListener('focusin', e => svTreeLight(e, true));
  document.addEventListener('focusout', e => svTreeLight(e, false));
}
