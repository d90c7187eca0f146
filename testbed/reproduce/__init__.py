"""`testbed reproduce`: runs the dissertation's artefacts (Figs 5.7/5.8, Tables 5.1-5.4) and
puts each beside the paper with a tolerance and PASS/FAIL. Sits between report and cli: it runs
scenarios and writes a report, so it imports both layers below it and nothing above."""
