"""The app's user interface, split by job.

The page (`app.py`) only lays things out. Underneath:

* `state`   — the run/session state machine with no Streamlit import: a `Run` is one recorded
  sequence of cycles (live, imported from a file, or replayed into another cache layout); a
  `Workspace` holds every run of a browser session and which one is shown. Stepping a run
  (next phase, next cycle, back, seek) is a pure function from one immutable `Run` to the next.
* `quiz`    — "predict, then reveal": the questions asked before a cycle's outcome is shown,
  and their scores, read from the trace.
* `session` — the Streamlit side of a browser session: its `Workspace` cell, the waiting box, and the
  shared model-pair store; `actions` the Streamlit-free half (the decoding slots, parking idle decoders).
* `stage_protocol` — the stage's messages, channel and payloads (no Streamlit), which the component
  (`stage_component`) and its HTTP route (`stage_route`) share.
* `sidebar` — the controls, within the server's limits.
* `stage`   — what the lecture looks at: buttons, status line, the KV-cache picture, the
  narrative, the token strip, the quiz.
* `tabs`    — the secondary views, one module each (`tab_charts`, `tab_stats`, `tab_lab`,
  `tab_export`), rendered only when their tab is open; `runs` the sidebar's run list.
"""
