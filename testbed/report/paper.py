"""What the dissertation reports for the testbed experiments (Chapter V), to print beside ours.

Table 5.4 (real testbed, DRL vs rule-based; processing time in seconds). Figs 5.7/5.8 give no
numbers in the text, only the qualitative result stated in Section 5.3, kept here verbatim in
substance as checks the report shows next to our figures.
"""

from __future__ import annotations

TABLE_5_4 = {
    # service: {policy: {metric: value}}
    "chatbot": {
        "ppo": {"slo_violation_rate": 0.0067, "instances": 2.2484, "proc_time_s": 0.4625,
                "reward": -0.0341},
        "rule_v2": {"slo_violation_rate": 0.0036, "instances": 2.5642, "proc_time_s": 0.3994,
                    "reward": -0.0353},
    },
    "imgcls": {
        "ppo": {"slo_violation_rate": 0.0026, "instances": 1.4946, "proc_time_s": 0.0874,
                "reward": -0.0210},
        "rule_v2": {"slo_violation_rate": 0.0106, "instances": 1.7024, "proc_time_s": 0.1023,
                    "reward": -0.0308},
    },
    "tts": {
        "ppo": {"slo_violation_rate": 0.0034, "instances": 2.0472, "proc_time_s": 0.3752,
                "reward": -0.0287},
        "rule_v2": {"slo_violation_rate": 0.0012, "instances": 2.2448, "proc_time_s": 0.3397,
                    "reward": -0.0291},
    },
}

FIG_5_7_5_8 = [
    "imgcls: without a slice, SLO violation rate and mean processing time grow with the number "
    "of iperf3 flows (10, 20, 40); with a 20 Mbit/s slice they are almost unaffected.",
    "tts: a small difference in mean processing time only at 40 flows; no difference in SLO "
    "violation rate with or without a slice.",
    "chatbot: no difference in SLO violation rate or processing time with or without a slice.",
]

SLICING_SETUP = ("100 Mbit/s bottleneck, 20 Mbit/s slice shared by the AI services, 6 replicas "
                 "per service, constant 10/30/10 req/s (chatbot/imgcls/tts), 10/20/40 iperf3 flows")
