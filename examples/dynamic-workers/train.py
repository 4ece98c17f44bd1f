"""Asynchronous parameter-server training that survives workers leaving and joining.

Run as every task of a TFJob (PS, Chief, Worker); the task comes from TF_CONFIG, in either form the
controller writes: dense (every task of the job listed) or sparse (``enableDynamicWorker: true``: a
worker sees only itself and the PS list; a PS sees no worker at all).

How it stays correct when workers come and go (see docs/dynamic-workers.md):

* The PS boots a server for its own job only and serves; it never needs to know the workers.
* Every other task boots its server as the one task of a ``localhost`` job at its own address and
  opens its session with ``ConfigProto(cluster_def=...)`` naming only the PS tasks and itself
  (TensorFlow's ClusterSpec propagation), with
  ``experimental.share_session_state_in_clusterspec_propagation`` so that all sessions share the
  variables on the PS.
* The chief, or worker 0, initialises the variables when they are uninitialised, restores the newest
  checkpoint onto them if there is one, and then sets a readiness flag that lives on the PS; every
  other task waits for that flag. A task that (re)joins finds it set and continues at the shared
  global step.
* With ``CHECKPOINT_DIR`` set, the chief or worker 0 writes a checkpoint of every variable on the PS
  (the model and the global step) every ``CHECKPOINT_EVERY_STEPS`` global steps and/or
  ``CHECKPOINT_EVERY_SECONDS`` seconds, keeping the newest ``CHECKPOINT_KEEP``, and one when training
  is finished. When a PS dies, every task's step fails (``UnavailableError``); each opens a new session,
  which waits until the PS is back at its address, and the chief or worker 0 restores the newest
  checkpoint onto the fresh PS before anyone trains again: at most one checkpoint interval of updates
  is lost. Without ``CHECKPOINT_DIR`` training starts over at global step 0 instead.
* The chief, or any worker, exits 0 once the global step reaches ``--steps``; with a Chief the job
  succeeds when the chief does, without one when worker 0 does.
* SIGTERM stops a task between two steps: it logs, closes its session and exits 143 (128 + SIGTERM),
  so that a terminated worker is never mistaken for one that finished training.

Output: one line per ``--log-every`` global steps (and the first step after joining):
``step=<global step> <task type>=<index> loss=<loss>``, plus ``event=...`` lines, among them
``event=checkpoint-saved step=<n> ...`` (``<n>``: the global step stored in it), ``event=ps-lost ...``,
``event=reconnected ...``, ``event=restored step=<n> ...`` and ``event=no-checkpoint ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

EXIT_SIGTERM = 128 + signal.SIGTERM


def _env(name: str, default: float, kind: type = int) -> Any:
    """The environment variable ``name`` converted by ``kind``, or ``default`` when it is unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        sys.exit(f"train.py: {name}={raw!r} is not {'an integer' if kind is int else 'a number'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=_env("TRAIN_STEPS", 1000),
        help="global step at which training is finished (env TRAIN_STEPS; default 1000)",
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=_env("TRAIN_LOG_EVERY", 10),
        help="log a step line every N global steps (env TRAIN_LOG_EVERY; default 10)",
    )
    parser.add_argument(
        "--step-delay",
        type=float,
        default=_env("TRAIN_STEP_DELAY", 0.05, float),
        help="seconds of simulated input work before each step, keeping a worker's CPU use low "
        "(env TRAIN_STEP_DELAY; default 0.05)",
    )
    parser.add_argument("--batch-size", type=int, default=_env("TRAIN_BATCH_SIZE", 64))
    parser.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("CHECKPOINT_DIR") or None,
        help="directory of the checkpoints the chief, or worker 0, writes and restores; it must exist "
        "(a volume that outlives the pods). Unset: no checkpoint, a lost PS means starting over "
        "(env CHECKPOINT_DIR)",
    )
    parser.add_argument(
        "--checkpoint-every-steps",
        type=int,
        default=_env("CHECKPOINT_EVERY_STEPS", 100),
        help="write a checkpoint once the global step has advanced this much since the last one; 0: never "
        "(env CHECKPOINT_EVERY_STEPS; default 100)",
    )
    parser.add_argument(
        "--checkpoint-every-seconds",
        type=float,
        default=_env("CHECKPOINT_EVERY_SECONDS", 0.0, float),
        help="write a checkpoint once this many seconds have passed since the last one; 0: never "
        "(env CHECKPOINT_EVERY_SECONDS; default 0)",
    )
    parser.add_argument(
        "--checkpoint-keep",
        type=int,
        default=_env("CHECKPOINT_KEEP", 3),
        help="how many of the newest checkpoints to keep (env CHECKPOINT_KEEP; default 3)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.log_every < 1 or args.batch_size < 1 or args.step_delay < 0:
        parser.error("--steps, --log-every and --batch-size must be positive, --step-delay not negative")
    if args.checkpoint_every_steps < 0 or args.checkpoint_every_seconds < 0 or args.checkpoint_keep < 1:
        parser.error("the checkpoint intervals must not be negative, --checkpoint-keep must be positive")
    return args


def parse_tf_config(raw: str | None) -> tuple[dict[str, dict[int, str]], str, int]:
    """(cluster as {job: {index: address}}, task type, task index) from TF_CONFIG.

    A job's tasks are a list (dense) or a map from decimal index to address (sparse); both become
    a map. Empty jobs are dropped.
    """
    if not raw:
        sys.exit("train.py: TF_CONFIG is not set; run this program as a task of a distributed TFJob")
    try:
        config = json.loads(raw)
        cluster: dict[str, dict[int, str]] = {}
        for job, tasks in (config.get("cluster") or {}).items():
            items = enumerate(tasks) if isinstance(tasks, list) else ((int(k), v) for k, v in tasks.items())
            entries = {int(i): str(address) for i, address in items}
            if entries:
                cluster[job] = entries
        task_type = str(config["task"]["type"])
        task_index = int(config["task"]["index"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        sys.exit(f"train.py: TF_CONFIG is not a TensorFlow cluster description: {exc}")
    if task_index not in cluster.get(task_type, {}):
        sys.exit(f"train.py: TF_CONFIG names task {task_type}:{task_index} but gives it no address")
    if "ps" not in cluster:
        sys.exit("train.py: TF_CONFIG lists no PS task; this program trains with parameter servers")
    return cluster, task_type, task_index


def _summary(exc: BaseException) -> str:
    """The lines of a TensorFlow error that say what happened, on one line (no graph dumps)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    useful = [
        line
        for line in lines
        if line and not line.startswith(("Graph execution error", "Detected at", "File ", "====="))
    ]
    return " ".join(useful)[:300] or type(exc).__name__


def is_initialiser(task: str, index: int) -> bool:
    """The chief (or master), or worker 0: the task that initialises, restores and checkpoints the model."""
    return task in ("chief", "master") or (task == "worker" and index == 0)


def log(text: str) -> None:
    print(text, flush=True)


def run_ps(tf: Any, cluster: dict[str, dict[int, str]], index: int) -> int:
    """Serve the variables until terminated. The PS knows only its own job: workers reach it with
    the cluster they propagate in their sessions."""
    spec = tf.train.ClusterSpec({"ps": cluster["ps"]})
    tf.distribute.Server(spec, job_name="ps", task_index=index, start=True)
    log(f"event=serving ps={index} address={cluster['ps'][index]}")
    stopped = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    stopped.wait()
    log(f"event=stopped ps={index} reason=SIGTERM")
    # The server's threads cannot be joined; leave without running its destructor.
    os._exit(EXIT_SIGTERM)


class Checkpoints:
    """The checkpoints of the model, written and restored by the initialising task (the chief, or worker 0).

    A ``tf.train.Checkpoint`` of every variable on the PS but the readiness flag, numbered by the global
    step and kept by a ``tf.train.CheckpointManager``. Its files are written and read by this task (the
    variables' values travel between the PS and it), where the checkpoint directory is mounted; a PS
    never touches them.
    """

    def __init__(self, tf: Any, args: argparse.Namespace, variables: dict[str, Any], device: str, label: str):
        self.tf = tf
        self.label = label
        self.every_steps = args.checkpoint_every_steps
        self.every_seconds = args.checkpoint_every_seconds
        self.directory = args.checkpoint_dir
        self.keep = args.checkpoint_keep
        self.checkpoint = tf.train.Checkpoint(**variables)
        # Without this each PS would write (and read) the shard of its own variables itself, on its
        # own file system, where the checkpoint directory is not mounted.
        self.options = tf.train.CheckpointOptions(experimental_io_device=f"{device}/device:CPU:0")
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=self.keep)
        self.step_key = "global_step/.ATTRIBUTES/VARIABLE_VALUE"
        self.last_step = 0
        self.last_time = time.monotonic()

    def due(self, step: int) -> bool:
        return (self.every_steps > 0 and step - self.last_step >= self.every_steps) or (
            self.every_seconds > 0 and time.monotonic() - self.last_time >= self.every_seconds
        )

    def save(self, sess: Any, step: int) -> None:
        started = time.monotonic()
        with sess.as_default():
            path = self.manager.save(checkpoint_number=step, options=self.options)
        took = time.monotonic() - started
        # Other workers train while the values are read: the global step stored is at least `step`.
        saved = int(self.tf.train.load_checkpoint(path).get_tensor(self.step_key))
        self.last_step, self.last_time = saved, time.monotonic()
        log(f"event=checkpoint-saved step={saved} {self.label} seconds={took:.3f} path={path}")

    def restore(self, sess: Any) -> str | None:
        """Restore the newest checkpoint onto the (initialised) variables; its path, or None if there is none."""
        # A restarted task reads the directory afresh: another incarnation may have written to it.
        self.manager = self.tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=self.keep)
        path = self.manager.latest_checkpoint
        if path is not None:
            status = self.checkpoint.restore(path, options=self.options)
            status.assert_existing_objects_matched().run_restore_ops(sess)
        self.last_time = time.monotonic()
        return path


class Trainer:
    """The training loop of a chief or worker task (runs in its own thread, see :func:`run_trainer`)."""

    def __init__(self, tf: Any, args: argparse.Namespace, cluster: dict[str, dict[int, str]], task: str, index: int):
        self.tf = tf
        self.args = args
        self.task = task
        self.index = index
        self.label = f"{task}={index}"
        self.stop = threading.Event()
        self.exit_code: int | None = None
        own_address = cluster[task][index]
        # This task's server: the one task of a `localhost` job at its own address. Booting it under
        # its own job name and then propagating a cluster that names that job is refused by TensorFlow.
        self.server = tf.distribute.Server(
            tf.train.ClusterSpec({"localhost": {0: own_address}}), job_name="localhost", task_index=0, start=True
        )
        # The cluster this task's sessions propagate: the PS tasks and itself, nothing else, so that
        # neither a worker missing from a dense TF_CONFIG nor one not yet started is ever waited for.
        self.session_cluster = tf.train.ClusterSpec({"ps": cluster["ps"], task: {index: own_address}})
        self.initialiser = is_initialiser(task, index)
        self.checkpoints: Checkpoints | None = None

    def build_graph(self) -> None:
        tf = self.tf
        v1 = tf.compat.v1
        worker_device = f"/job:{self.task}/task:{self.index}"
        device_setter = v1.train.replica_device_setter(worker_device=worker_device, cluster=self.session_cluster)
        with v1.device(device_setter):
            self.global_step = v1.train.get_or_create_global_step()
            # A small regression problem with a known answer, drawn fresh each step.
            features = 16
            true_w = tf.constant([[0.1 * (i - features / 2)] for i in range(features)])
            x = tf.random.normal([self.args.batch_size, features])
            y = tf.matmul(x, true_w) + 0.5 + 0.01 * tf.random.normal([self.args.batch_size, 1])
            w1 = v1.get_variable("hidden/kernel", [features, 32], initializer=v1.glorot_uniform_initializer())
            b1 = v1.get_variable("hidden/bias", [32], initializer=v1.zeros_initializer())
            w2 = v1.get_variable("out/kernel", [32, 1], initializer=v1.glorot_uniform_initializer())
            b2 = v1.get_variable("out/bias", [1], initializer=v1.zeros_initializer())
            prediction = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
            self.loss = tf.reduce_mean(tf.square(prediction - y))
            optimizer = v1.train.GradientDescentOptimizer(0.01)
            apply = optimizer.minimize(self.loss)
            with tf.control_dependencies([apply]):
                # The global step after this step's update (assign_add returns the new value).
                self.train_step = self.global_step.assign_add(1)
            # Set by the initialising task once the model is initialised and restored: a task that sees
            # it set trains on the restored model, never on freshly initialised values. It lives on a
            # PS, so a PS that comes back empty has it unset (uninitialised) until then.
            self.ready = v1.Variable(False, name="model_ready", trainable=False)
        self.read_step = self.global_step.read_value()
        self.read_ready = self.ready.read_value()
        self.set_ready = self.ready.assign(True)
        self.uninitialised = v1.report_uninitialized_variables()
        self.init = v1.global_variables_initializer()
        if self.initialiser and self.args.checkpoint_dir:
            model = {v.op.name.replace("/", "."): v for v in v1.global_variables() if v is not self.ready}
            self.checkpoints = Checkpoints(tf, self.args, model, worker_device, self.label)

    def session(self) -> Any:
        v1 = self.tf.compat.v1
        config = v1.ConfigProto(
            cluster_def=self.session_cluster.as_cluster_def(),
            intra_op_parallelism_threads=1,
            inter_op_parallelism_threads=2,
        )
        config.experimental.share_session_state_in_clusterspec_propagation = True
        return v1.Session(self.server.target, config=config)

    def prepare(self, sess: Any) -> int:
        """Restore the newest checkpoint onto the initialised variables and set the readiness flag. Returns the
        global step the model is ready at, read before the flag is set: no other task can have trained on it."""
        path = self.checkpoints.restore(sess) if self.checkpoints is not None else None
        step = int(sess.run(self.read_step))
        if self.checkpoints is not None:
            if path is None:
                log(f"event=no-checkpoint {self.label} dir={self.args.checkpoint_dir}")
            else:
                log(f"event=restored step={step} {self.label} path={path}")
            self.checkpoints.last_step = step
        sess.run(self.set_ready)
        return step

    def wait_for_model(self, sess: Any) -> int | None:
        """Make the model ready (initialiser) or wait until it is. Returns the global step this task joins at
        (the initialiser: the step it made the model ready at), or None if stopped first."""
        while not self.stop.is_set():
            if len(sess.run(self.uninitialised)) == 0:
                if sess.run(self.read_ready):
                    return int(sess.run(self.read_step))
                if self.initialiser:
                    # Initialised but not ready: the task that initialised died before it was done.
                    return self.prepare(sess)
            elif self.initialiser:
                sess.run(self.init)
                log(f"event=initialised {self.label}")
                return self.prepare(sess)
            self.stop.wait(0.5)
        return None

    def run(self) -> None:
        errors = self.tf.errors
        # What a step or a new session raises when a PS dies or comes back empty: its connection is
        # reset (Unavailable), the step is aborted or cancelled, or a variable is not (yet) there.
        retryable = (
            errors.UnavailableError,
            errors.AbortedError,
            errors.CancelledError,
            errors.InternalError,
            errors.FailedPreconditionError,
        )
        self.build_graph()
        lost = False
        while self.exit_code is None:
            try:
                with self.session() as sess:
                    self.exit_code = self.train(sess, lost)
            except retryable as exc:
                # The PS went away (its pod restarts): its variables are gone with it. The next
                # session waits for it to come back, and for the model to be ready again.
                log(f"event=ps-lost {self.label} error={type(exc).__name__}: {_summary(exc)}")
                lost = True
                if self.stop.wait(1.0):
                    self.exit_code = EXIT_SIGTERM

    def train(self, sess: Any, reconnecting: bool) -> int:
        if reconnecting:
            # The first operation on the PS: it blocks until the PS is back at its address.
            sess.run(self.uninitialised)
            log(f"event=reconnected {self.label}")
        step = self.wait_for_model(sess)
        if step is None:
            return self.stopped(sess)
        log(f"event=joined step={step} {self.label}")
        first = True
        while step < self.args.steps:
            if self.stop.wait(self.args.step_delay):
                return self.stopped(sess)
            loss, step = sess.run([self.loss, self.train_step])
            if first or step % self.args.log_every == 0:
                log(f"step={step} {self.label} loss={loss:.4f}")
                first = False
            if self.checkpoints is not None and self.checkpoints.due(step):
                self.checkpoints.save(sess, step)
        if self.checkpoints is not None:
            self.checkpoints.save(sess, step)
        log(f"event=finished step={step} {self.label}")
        return 0

    def stopped(self, sess: Any) -> int:
        log(f"event=stopped step={sess.run(self.read_step)} {self.label} reason=SIGTERM")
        return EXIT_SIGTERM


def run_trainer(tf: Any, args: argparse.Namespace, cluster: dict[str, dict[int, str]], task: str, index: int) -> int:
    """Train in a thread; the main thread handles SIGTERM. A step in progress finishes; a task blocked
    inside TensorFlow (say, waiting for an unreachable PS) exits after a short grace instead."""
    trainer = Trainer(tf, args, cluster, task, index)
    failure: list[BaseException] = []

    def target() -> None:
        try:
            trainer.run()
        except BaseException as exc:  # reported by the main thread, which owns the exit code
            failure.append(exc)

    thread = threading.Thread(target=target, name="train", daemon=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: trainer.stop.set())
    thread.start()
    while thread.is_alive() and not trainer.stop.is_set():
        thread.join(0.2)
    if trainer.stop.is_set():
        thread.join(10.0)
        if thread.is_alive():
            log(f"event=stopped {task}={index} reason=SIGTERM (inside TensorFlow)")
            os._exit(EXIT_SIGTERM)
    if failure:
        raise failure[0]
    return trainer.exit_code if trainer.exit_code is not None else EXIT_SIGTERM


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster, task, index = parse_tf_config(os.environ.get("TF_CONFIG"))
    if task not in ("worker", "chief", "master", "ps"):
        sys.exit(f"train.py: task type {task!r} does not train here (worker, chief, master or ps)")
    if is_initialiser(task, index) and args.checkpoint_dir and not os.path.isdir(args.checkpoint_dir):
        # Not created here: a path that is not the mounted volume would hold checkpoints no pod outlives.
        sys.exit(f"train.py: CHECKPOINT_DIR={args.checkpoint_dir!r} is not a directory; mount a volume there")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    if task == "ps":
        return run_ps(tf, cluster, index)
    return run_trainer(tf, args, cluster, task, index)


if __name__ == "__main__":
    sys.exit(main())
