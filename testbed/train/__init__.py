"""Joins the simulator and a scaler: the Gymnasium env, PPO training, threshold tuning, policy
evaluation and the oracle bound."""
