"""The app's user interface, split by job: `app.py` only lays the page out; each module here does one
thing (the run state machine, the quiz, the session, the stage's protocol, component and route, the
sidebar, the stage, one module per tab), and the Streamlit-free ones (`state`, `quiz`, `actions`,
`stage_protocol`) are tested without a page. The module map: docs/design.md §3, "Architecture and layout".
"""
