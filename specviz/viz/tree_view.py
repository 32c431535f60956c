"""A token-tree cycle drawn phase by phase: the tree, its attention mask, its entries, the compaction.

Each part appears when its phase reveals it, never before (docs/design.md §1c, "The views"): the
tree with q from draft, p, the mask and the verify entries (entry ≠ position) from verify, verdicts
and the winning path from accept, the corrected or bonus token from resolve, the compaction at
rollback. K/V cells are keyed by node, so the stage glides a moved cell into its new column.
Pure HTML from a `CycleTrace`, which is also the no-JavaScript fallback; styles `static/tree.css`,
the linked highlight `static/tree.js`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..timeline import VERDICT_GLYPHS
from ..timeline import phase_index as _step
from ..trace import CycleTrace, TreeNode, TreeTrace
from .markup import esc
from .style import PHASE_TITLES, fmt_p, show_token

TokenText = Callable[[int], str]
MASK_MAX_NODES = 32  # mask rows/columns drawn; a bigger tree shows its first nodes and says so
TOKEN_CHARS = 6  # a node shows its token whole up to this many characters, else 5 and "…" (as a cache cell)
KV_LINE = 12  # verify entries per line at most: more wrap into balanced lines (never cut off)


def tree_panel_html(trace: CycleTrace | None, phase: str, token_text: TokenText, *, lecture: bool = False,
                    parts: tuple[str, ...] = ("tree", "mask", "cache")) -> str:
    """The panel for `trace` at `phase` ("" for a chain cycle, or before the tree is drafted).
    `parts` picks the sections (a compared layout shows only its own cache)."""
    if trace is None or trace.tree is None or _step(phase) < _step("draft"):
        return ""
    step = _step(phase)
    tree = trace.tree
    key = esc(f"tv{trace.cycle}")  # escaped once: every node's data-key starts with it
    if not tree.nodes:  # nothing proposed (prompt lookup without a match): a plain target step
        note = trace.proposer_note or "the proposer proposed nothing"
        return (f"<div class='svtree' role='note' data-role='tree' data-key='{key}'><p class='svtree-note'>"
                f"No token tree this cycle: {esc(note.rstrip('.'))}.</p></div>")
    body = []
    if "tree" in parts:
        body.append(_tree_html(trace, step, token_text, key, lecture))
    if "mask" in parts and step >= _step("verify"):
        body.append(_mask_html(trace, step, token_text, key))
    if "cache" in parts and step >= _step("verify"):
        body.append(_cache_html(trace, step, token_text, key))
    label = (f"Token tree of cycle {trace.cycle + 1} · {PHASE_TITLES.get(phase, phase)}: {len(tree.nodes)} nodes, "
             f"width {tree.width}, depth {max((n.depth for n in tree.nodes), default=0)}")
    # The phase names the layout: lecture mode arranges the sections around what the phase teaches.
    return (
        f"<div class='svtree svtree-p-{esc(phase)}{' svtree-lecture' if lecture else ''}' role='figure' "
        "data-role='tree' "
        f"data-key='{key}' aria-label='{esc(label)}'>"
        + "".join(body)
        + f"<p class='svtree-sr'>{esc(describe(trace, phase, token_text))}</p></div>"
    )


# ---- the tree ------------------------------------------------------------------------------------


def root_token(trace: CycleTrace) -> int:
    """The root's token id (x_n), read from the verify snapshot's slot it was written to."""
    snap = trace.snapshot("verify").target
    slot = trace.tree.root_slot
    return snap.slot_tokens[slot] if 0 <= slot < len(snap.slot_tokens) else -1


def kept_path(trace: CycleTrace) -> tuple[int, ...]:
    """The accepted nodes whose K/V the committed sequence keeps: the path, less the newest
    committed token (its K/V is written by the next verify pass) when the end of the text cut it."""
    return trace.tree.path[: max(0, len(trace.emitted) - 1)]


def _rule(node: TreeNode, greedy: bool) -> str:
    """The test that decided the node, in symbols."""
    if node.verdict == "untested":
        return "not asked"
    if greedy:
        return "= argmax" if node.verdict == "accepted" else "≠ argmax"
    if node.u is None or node.accept_prob is None:
        return node.verdict
    sign = "<" if node.verdict == "accepted" else "≥"
    return f"u {fmt_p(node.u)} {sign} p′ {fmt_p(node.accept_prob)}"


def _token(text: str) -> str:
    """A token as a node or an entry shows it (rule 1 of the stage: whole up to 6 characters), with
    its whole display form in `data-token`."""
    return (f"<span class='svtree-tok' data-token='{esc(show_token(text, 10**6))}'>"
            f"{esc(show_token(text, TOKEN_CHARS))}</span>")


def rows(tree: TreeTrace, tail_parent: int | None = None) -> tuple[dict[int, int], int | None, int]:
    """The tree's grid rows: a node's first child on the node's own row, each later child on the
    next new row (so a tree takes a row per leaf, not per node); the tail token, if any, as the last
    child of `tail_parent`. Returns (row of each node, 0 for the root; the tail's row; rows used)."""
    order = [n.index for n in tree.nodes]  # depth-first, children best first
    parent = {n.index: n.parent for n in tree.nodes}
    if tail_parent is not None:
        at = order.index(tail_parent) + 1 if tail_parent else 0
        while at < len(order) and tail_parent in ancestors(tree, order[at]) - {order[at]}:
            at += 1  # past tail_parent's subtree: the tail is its last child
        order.insert(at, -1)
        parent[-1] = tail_parent
    row, used, prev = {0: 0}, 1, 0
    for n in order:
        if parent[n] == prev:  # right after its parent: the first child, on the parent's row
            row[n] = row[parent[n]]
        else:
            row[n], used = used, used + 1
        prev = n
    tail = row.pop(-1, None)
    return row, tail, used


def _tree_html(trace: CycleTrace, step: int, token_text: TokenText, key: str, lecture: bool = False) -> str:
    tree = trace.tree
    greedy = trace.temperature == 0
    depth = max((n.depth for n in tree.nodes), default=0)
    last = trace.emitted[-1] if trace.emitted else None
    tail = last if step >= _step("resolve") and last is not None and last.kind in ("corrected", "bonus") else None
    tail_depth = len(tree.path) + 1
    cols = max(depth, tail_depth if tail else 0) + 1
    grid_row, tail_row, n_rows = rows(tree, (tree.path[-1] if tree.path else 0) if tail else None)
    L = tree.root_position
    heads = [f"<div class='svtree-dcol' style='grid-column:{esc(d + 1)}'>{f'depth {esc(d)}' if d else 'root'}<br>"
             f"<span>position {esc(L + d)}</span></div>" for d in range(cols)]
    on_path = set(tree.path) if step >= _step("accept") else set()
    parents = {n.parent for n in tree.nodes}
    kids = " svtree-kids" if tree.nodes else ""
    cells = [
        f"<div class='svtree-node svtree-root{kids}' style='grid-row:2;grid-column:1' data-n='0' tabindex='0' "
        f"data-key='{key}-t0' title='root: x_n, the newest committed token (position {esc(L)})'>"
        f"{_token(token_text(root_token(trace)))}<span class='svtree-sub'>x_n</span></div>"
    ]
    for node in tree.nodes:
        up = grid_row[node.index] - grid_row[node.parent]
        cells.append(_node_html(node, step, greedy, node.index in on_path, node.index in parents, key,
                                grid_row[node.index] + 2, up, lecture, trace.drafts[node.index - 1].source))
    if tail is not None:
        where = "from p′ (every child rejected)" if tail.kind == "corrected" else "from the leaf's p (bonus)"
        up = tail_row - grid_row[tree.path[-1] if tree.path else 0]
        cells.append(
            f"<div class='svtree-node svtree-tail svtree-k-{esc(tail.kind)}' style='grid-row:{esc(tail_row + 2)};"
            f"grid-column:{esc(tail_depth + 1)};--up:{esc(up)}' data-key='{key}-tail' data-role='tree-tail' "
            f"title='{esc(f'{tail.kind} token at position {tail.position}, {where}')}'>"
            f"{_token(tail.text)}<span class='svtree-sub'>{esc(tail.kind)}</span></div>"
        )
    if greedy:
        rule = ("T = 0: at each node the child equal to the target's argmax is accepted; where none is, the argmax "
                "is the corrected token")
    else:
        rule = ("T > 0, deterministic siblings: children are asked in order, x accepted iff u < p′(x), p′ = p with "
                "the rejected siblings zeroed and renormalised; no q in the test")
    intro = "q: the proposer's probability of the node given its parent" + (
        "; p: the target's, from the verify pass" if step >= _step("verify") else "") + (
        _marks_legend(trace))
    summary = _summary(trace, step)
    return (
        "<section class='svtree-sec svtree-treesec' aria-label='The token tree'>"
        f"<h3 class='svtree-title'>Token tree · width {esc(tree.width)}, {len(tree.nodes)} nodes</h3>"
        f"<p class='svtree-note'>{esc(intro)}{'. ' + esc(rule) if step >= _step('accept') else ''}</p>"
        f"<div class='svtree-grid' style='--cols:{esc(cols)};--rows:{esc(n_rows)}'>{''.join(heads + cells)}</div>"
        + (f"<p class='svtree-note svtree-path' data-role='tree-path'>{esc(summary)}</p>" if summary else "")
        + "</section>"
    )


# A merged tree marks the nodes its copier proposed (alone, or with the feature head): R, R+F for
# retrieval, L, L+F for prompt lookup.
SOURCE_MARKS = {"retrieval": "R", "both": "R+F", "prompt lookup": "L", "feature head + prompt lookup": "L+F"}


def _marks_legend(trace: CycleTrace) -> str:
    """What the source marks on this tree's nodes mean ("": none carries one)."""
    sources = {d.source for d in trace.drafts}
    if sources & {"retrieval", "both"}:
        return "; R: a branch retrieval copied from earlier text, R+F: one the feature head proposed too"
    if sources & {"prompt lookup", "feature head + prompt lookup"}:
        return "; L: a branch prompt lookup copied from earlier in the context, L+F: one the feature head proposed too"
    return ""


def _node_html(node: TreeNode, step: int, greedy: bool, on_path: bool, kids: bool, key: str, row: int,
               up: int, lecture: bool = False, source: str = "") -> str:
    classes = ["svtree-node"] + (["svtree-kids"] if kids else [])
    lines = [f"q {fmt_p(node.draft_prob)}"]
    if step >= _step("verify"):
        # A lecture screen keeps each box to what the phase adds (q stays in the tooltip): the
        # verify pass brings p, the test that decides a node uses p′ and u, not q.
        lines = lines[:0 if lecture else 1] + [f"p {fmt_p(node.target_prob)}"]
    verdict = ""
    if step >= _step("accept"):
        classes.append(f"svtree-v-{esc(node.verdict)}")
        if on_path:
            classes.append("svtree-win")
        verdict = f"<span class='svtree-verdict' data-role='tree-verdict'>{VERDICT_GLYPHS[node.verdict]}</span>"
        lines = [_rule(node, greedy)] if node.verdict != "untested" else lines
    tip = (f"node {node.index} (parent {node.parent}), depth {node.depth}, position {node.position}, "
           f"verify entry L+{node.index} (slot {node.slot}): q = {fmt_p(node.draft_prob)}")
    if step >= _step("verify"):
        tip += f", p = {fmt_p(node.target_prob)}"
    if step >= _step("accept"):
        tip += f"; {node.verdict} ({_rule(node, greedy)})"
    if source:
        tip += f"; proposed by {'the feature head and retrieval' if source == 'both' else source}"
    mark = SOURCE_MARKS.get(source)
    mark = f"<span class='svtree-src' data-role='tree-source'>{esc(mark)}</span>" if mark else ""
    return (
        f"<div class='{' '.join(classes)}' style='grid-row:{esc(row)};grid-column:{esc(node.depth + 1)};"
        f"--up:{esc(up)}' data-n='{esc(node.index)}' data-key='{key}-t{esc(node.index)}' tabindex='0' "
        f"data-role='tree-node' title='{esc(tip)}'>"
        f"<span class='svtree-id'>{esc(node.index)}</span>{mark}{_token(node.text)}{verdict}"
        f"<span class='svtree-sub'>{esc(' · '.join(lines))}</span></div>"
    )


def _summary(trace: CycleTrace, step: int) -> str:
    tree = trace.tree
    if step < _step("accept"):
        return ""
    path = tree.path
    chain = " → ".join(f"{a} {show_token(_node(tree, a).text, 40)}" for a in path)
    text = f"Accepted path: {chain}" if path else "No child of the root passed"
    if step >= _step("resolve") and trace.emitted:
        last = trace.emitted[-1]
        if last.kind in ("corrected", "bonus"):
            text += f"; then the {last.kind} token {show_token(last.text, 40)}"
        text += f". The cycle commits {len(trace.emitted)} token(s) from one verify pass."
    return text


def _node(tree: TreeTrace, index: int) -> TreeNode:
    return tree.nodes[index - 1]


# ---- the mask ------------------------------------------------------------------------------------


def ancestors(tree: TreeTrace, index: int) -> set[int]:
    """The node, its ancestors and the root (0)."""
    out = {index}
    while index > 0:
        index = _node(tree, index).parent
        out.add(index)
    return out


def _mask_html(trace: CycleTrace, step: int, token_text: TokenText, key: str) -> str:
    tree = trace.tree
    shown = min(len(tree.nodes), MASK_MAX_NODES)
    ids = list(range(shown + 1))
    labels = {0: show_token(token_text(root_token(trace)), 6)} | {
        n.index: show_token(n.text, 6) for n in tree.nodes[:shown]}
    win = set(tree.path) | {0} if step >= _step("accept") else set()
    L = tree.root_position
    head = ["<div class='svtree-mh svtree-corner'>query ↓ key →</div>",
            f"<div class='svtree-mh svtree-mprefix' title='the committed prefix: positions 0–{esc(L - 1)}'>"
            f"prefix<br>0–{esc(max(L - 1, 0))}</div>"]
    # A key column is named by its node number (the row labels and the tree carry the tokens).
    head += [f"<div class='svtree-mh' data-n='{esc(j)}' title='key: node {esc(j)} {esc(labels[j])}'>{esc(j)}</div>"
             for j in ids]
    rows = []
    for i in ids:
        seen = ancestors(tree, i) if i else {0}
        cls = " svtree-mwin" if i in win else ""
        row = [f"<div class='svtree-mh svtree-mrow{cls}' data-n='{esc(i)}'>{esc(i)} {esc(labels[i])}</div>",
               "<div class='svtree-m svtree-m1 svtree-mprefix' title='the whole prefix: allowed'>■</div>"]
        for j in ids:
            allowed = j in seen
            row.append(f"<div class='svtree-m{' svtree-m1' if allowed else ''}{cls}' "
                       f"title='node {esc(i)} {'sees' if allowed else 'does not see'} node {esc(j)}'>"
                       f"{'■' if allowed else ''}</div>")
        rows.append("".join(row))
    more = (f"<p class='svtree-note'>The first {shown} of {len(tree.nodes)} nodes are drawn; every row follows "
            "the same rule.</p>" if shown < len(tree.nodes) else "")
    return (
        f"<section class='svtree-sec' aria-label='Tree attention mask' data-role='tree-mask' data-key='{key}-mask'>"
        "<h3 class='svtree-title'>Tree attention mask · ■ may attend</h3>"
        "<p class='svtree-note'>■ = may attend (an additive 0), empty = masked (the dtype's minimum). Each node "
        "sees the whole prefix, its ancestors and itself — never a sibling or a cousin.</p>"
        f"<div class='svtree-mask' style='--cols:{esc(shown + 1)}'>{''.join(head)}{''.join(rows)}</div>{more}</section>"
    )


# ---- the target cache: slot vs position, then the compaction ---------------------------------------


def freed_blocks(trace: CycleTrace) -> set[int]:
    return {b for e in trace.target_events if e.kind == "free" and e.phase == "rollback" for b in e.blocks}


def _cache_html(trace: CycleTrace, step: int, token_text: TokenText, key: str) -> str:
    tree = trace.tree
    snap = trace.snapshot("verify").target
    paged = snap.layout == "paged"
    page = snap.page_size if paged else 0
    L = tree.root_position
    n_cols = len(tree.nodes) + 1
    slots = [tree.root_slot] + [n.slot for n in tree.nodes]  # verify entry L+c -> physical slot
    compacted = step >= _step("rollback")
    kept = kept_path(trace) if compacted else ()
    on_path = set(tree.path) if step >= _step("accept") else set()
    freed = freed_blocks(trace) if compacted else set()
    new_len = L + 1 + len(kept)  # valid entries after the rollback: 0 .. L + len(kept)

    # Entry = the cache's index L+c (what the sequence reads), slot = where it lives in memory (a
    # block's row): one word per concept. Long rows wrap into balanced lines, never cut off.
    per_line = -(-n_cols // -(-n_cols // KV_LINE))
    heads = []
    for c in range(n_cols):
        line, col = divmod(c, per_line)
        new_block = paged and (c == 0 or col == 0 or slots[c] // page != slots[c - 1] // page)
        block = f"<br>block {esc(slots[c] // page)}" if new_block else ""
        edge = " svtree-bedge" if paged and c and slots[c] // page != slots[c - 1] // page else ""
        heads.append(f"<div class='svtree-ch{edge}' style='{_kv_at(c, per_line, 1)}'>entry {esc(L + c)}<br>"
                     f"<span>slot {esc(slots[c])}{block}</span></div>")
    cells = [_kv_cell(key, 0, 0, "root", token_text(root_token(trace)), L, per_line, committed=compacted)]
    if not compacted:
        for node in tree.nodes:
            state = "win" if node.index in on_path else node.verdict if step >= _step("accept") else "prov"
            cells.append(_kv_cell(key, node.index, node.index, state, node.text, node.position, per_line))
    else:
        for i, a in enumerate(kept, start=1):  # the compaction: node a's K/V now in entry L+i
            node = _node(tree, a)
            cells.append(_kv_cell(key, a, i, "moved" if a != i else "kept", node.text, node.position, per_line,
                                  committed=True, came_from=L + a if a != i else None))
        for c in range(len(kept) + 1, n_cols):
            state = "freed" if paged and slots[c] // page in freed else "stale"
            cells.append(
                f"<div class='svtree-kv svtree-kv-{state}' style='{_kv_at(c, per_line, 2)}' data-col='{esc(c)}' "
                f"data-key='{key}-x{esc(c)}' "
                f"data-role='tree-{state}' title='entry {esc(L + c)}: {state}'>"
                f"<span class='svtree-tok'>{'✕' if state == 'stale' else ''}</span>"
                f"<span class='svtree-sub'>{state}</span></div>"
            )
    if not compacted:
        note = ("During verify node i sits in entry L+i but at position L + depth: entry ≠ position, and "
                "siblings share a position.")
    elif not tree.moves:
        note = (f"No copy: the accepted path is nodes 1…{len(kept)}, already in entries {L + 1}…{L + len(kept)}. "
                if kept else "No copy: no node's K/V is kept (only the root's). ")
        note += f"The cache is cut back to {new_len} entries."
    else:
        moves = "; ".join(f"entry {s} → {d}" for s, d in tree.moves)
        note = (f"Compaction: {len(tree.moves)} K/V move(s), in increasing order ({moves}). No re-rotation: node "
                f"a_i was computed at position L+i already. The cache is cut back to {new_len} entries.")
    if freed:
        note += f" Block(s) {', '.join(map(str, sorted(freed)))} went back to the pool."
    title = "Target cache: the compaction" if compacted else "Target cache during verify: one entry per node"
    return (
        f"<section class='svtree-sec' aria-label='{esc(title)}' data-role='tree-kv' data-key='{key}-kvsec'>"
        f"<h3 class='svtree-title'>{esc(title)}</h3>"
        f"<div class='svtree-kvgrid' style='--cols:{esc(per_line)}'>{''.join(heads)}{''.join(cells)}</div>"
        f"<p class='svtree-note' data-role='tree-kvnote'>{esc(note)}</p></section>"
    )


def _kv_at(c: int, per_line: int, part: int) -> str:
    """Where entry L+`c`'s header (`part` 1) or cell (2) goes in the wrapped grid of verify entries."""
    line, col = divmod(c, per_line)
    return esc(f"grid-row:{2 * line + part};grid-column:{col + 1}")


def _kv_cell(key: str, node: int, col: int, state: str, text: str, position: int, per_line: int, *,
             committed: bool = False, came_from: int | None = None) -> str:
    """Node `node`'s K/V in entry root+`col`: the key is the node's, so a move is the same DOM node."""
    cls = esc(f"svtree-kv svtree-kv-{state}" + (" svtree-kv-committed" if committed else ""))
    role = " data-role='tree-move'" if came_from is not None else ""
    label = "root" if node == 0 else f"node {node}"
    tip = f"{label}: position {position}" + (f", moved here from entry {came_from}" if came_from is not None else "")
    return (
        f"<div class='{cls}' style='{_kv_at(col, per_line, 2)}' data-col='{esc(col)}' data-key='{key}-n{esc(node)}' "
        f"data-n='{esc(node)}'{role} "
        f"tabindex='0' title='{esc(tip)}'>{_token(text)}"
        f"<span class='svtree-sub'>{esc(f'pos {position} · #{node}')}</span>"
        + (f"<span class='svtree-sub svtree-from'>← entry {esc(came_from)}</span>" if came_from is not None else "")
        + "</div>"
    )


# ---- words ---------------------------------------------------------------------------------------


def describe(trace: CycleTrace, phase: str, token_text: TokenText) -> str:
    """The panel in words (its text alternative)."""
    tree = trace.tree
    step = _step(phase)
    L = tree.root_position
    parts = [f"A token tree of {len(tree.nodes)} nodes grown from the root "
             f"{show_token(token_text(root_token(trace)), 40)} at position {L}."]
    for node in tree.nodes:
        words = (f"Node {node.index} {show_token(node.text, 40)}, child of {node.parent}, depth {node.depth}, "
                 f"position {node.position}")
        if step >= _step("verify"):
            words += f", verify entry {L + node.index} (slot {node.slot}), p {fmt_p(node.target_prob)}"
        if step >= _step("accept"):
            words += f", {node.verdict}"
        parts.append(words + ".")
    if step >= _step("accept"):
        parts.append(f"Accepted path: nodes {', '.join(map(str, tree.path)) or 'none'}.")
    if step >= _step("rollback"):
        parts.append("Moves: " + ("; ".join(f"entry {s} to {d}" for s, d in tree.moves) if tree.moves
                                  else "none, the path was in place") + ".")
    return " ".join(parts)
