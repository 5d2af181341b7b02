"""`Settings`: what most code wants of the environment (the storage and how to reach it,
the Spark endpoint, the checkpointing knobs, the savepoint roots, the quality gate), built
from `environment.BatchpointEnvironment`, and handed to a child process as variables."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import values
from batchpoint.settings.environment import (
    S3_PREFIX,
    BatchpointEnvironment,
    extra_store_options,
    read_environment,
    variable,
)
from batchpoint.settings.values import SparkMode
from batchpoint.storage import StoreRef, redaction


@dataclass(frozen=True)
class Settings:
    """Where the storage is and how to reach it, the Spark master, the checkpointing
    knobs, where savepoints may go, and the restore quality gate. Credential store
    options are Secrets (masked in the repr); `as_env` hands a child the real values."""

    root: str
    store_options: Mapping[str, str | redaction.Secret] = field(default_factory=dict)
    spark_master: str = "local[2]"
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: URIs (with a trailing slash) savepoints may be written under and restored from;
    #: empty when built means the root's own `savepoints/` folder.
    savepoint_roots: tuple[str, ...] = ()
    quality_gate_ref: str | None = None
    #: None: the front end's default (see the module's table).
    spark_mode: SparkMode | None = None
    spark_remote: str | None = None
    #: Spark settings every session of the jobs applies (connect and classic alike).
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Every field as the generated repr shows it, URIs without a password or token:
        # a root or master given through a connection may carry one.
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        for name in ("root", "spark_master", "spark_remote"):
            if shown.get(name):
                shown[name] = redaction.redact_uri(shown[name])
        shown["savepoint_roots"] = tuple(map(redaction.redact_uri, self.savepoint_roots))
        shown["spark_conf"] = redaction.masked_conf(self.spark_conf)
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def __post_init__(self) -> None:
        object.__setattr__(self, "store_options", redaction.conceal_options(self.store_options))
        if not self.savepoint_roots:
            object.__setattr__(self, "savepoint_roots", (values.default_savepoint_root(self.root),))
        if self.spark_mode is not None:
            object.__setattr__(self, "spark_mode", SparkMode(self.spark_mode))

    @property
    def store_ref(self) -> StoreRef:
        return StoreRef.of(self.root, self.store_options)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """The settings of `env` (default os.environ); `overrides` such as `root` or
        `spark_master` (empty: not given) win over the variables."""
        return cls.of(read_environment(env, **overrides), env)

    @classmethod
    def of(cls, model: BatchpointEnvironment, env: Mapping[str, str] | None = None) -> Settings:
        extra = extra_store_options(env) if model.root.startswith("s3://") else {}
        return cls(
            root=model.root,
            store_options={**extra, **model.store_options},
            spark_master=model.spark_master,
            checkpoint=model.checkpoint_config(),
            savepoint_roots=model.effective_savepoint_roots,
            quality_gate_ref=model.quality_gate,
            spark_mode=model.spark_mode,
            spark_remote=model.spark_remote,
            spark_conf=model.spark_conf,
        )

    def with_storage(
        self, root: str, store_options: Mapping[str, str | redaction.Secret]
    ) -> Settings:
        """The same settings on another storage (an Airflow connection's): savepoint
        roots that were the old root's default follow the new root."""
        default = (values.default_savepoint_root(self.root),)
        roots = () if self.savepoint_roots == default else self.savepoint_roots
        return dataclasses.replace(
            self, root=root, store_options=dict(store_options), savepoint_roots=roots
        )

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        out = {
            variable("root"): self.root,
            variable("spark_master"): self.spark_master,
            variable("savepoint_roots"): ",".join(self.savepoint_roots),
        }
        for name, value in redaction.revealed_options(self.store_options).items():
            out[S3_PREFIX + name.upper()] = str(value)
        c = self.checkpoint
        for f in fields(c):
            out[variable(_CONFIG_FIELDS.get(f.name, f.name))] = str(getattr(c, f.name)).lower()
        if self.quality_gate_ref:
            out[variable("quality_gate")] = self.quality_gate_ref
        if self.spark_mode:
            out[variable("spark_mode")] = self.spark_mode.value
        if self.spark_remote:
            out[variable("spark_remote")] = self.spark_remote
        if self.spark_conf:
            out[variable("spark_conf")] = json.dumps(dict(self.spark_conf))
        return out


# CheckpointConfig fields whose variable is named differently.
_CONFIG_FIELDS = {"timeout": "checkpoint_timeout"}
