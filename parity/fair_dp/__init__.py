"""Parity with layer6ai-labs/fair-dp (DPSGD-F, DPSGD-Global-Adapt): results/parity/fair-dp.md."""
