"""What the checkpoint was trained with, as far as a run's settings reach it: the sampling of RL and the length of
its episodes. The settings (config.py) offer them as presets; the deviations (deviations.py) measure a run against
them."""

from __future__ import annotations

# `--sampling training` brings RL's sampling back in one flag; `default` is Qwen3's advice for non-thinking use.
SAMPLING_PRESETS: dict[str, dict[str, float | int]] = {
    "default": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 4096},
    "training": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8192},
}
CAMEL_TRAINING_TURNS = 10  # the episode length the checkpoint was trained with
