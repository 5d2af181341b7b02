"""batchpoint: Flink-style checkpoints for stateful batch pipelines."""

__version__ = "0.1.0"
