"""Asynchronous parameter-server training for the static example TFJobs (manifests/examples/ps-worker.yaml and
chief-evaluator.yaml): logistic regression on synthetic data, in graph mode, with the model on the PS.

Run as every task of the job. The task and the cluster come from TF_CONFIG, in the dense form a static job gets
(every task of the job listed):

* ``ps``: serves the model until it is stopped (the job's ``cleanPodPolicy: Running`` removes it once the job
  is done).
* ``chief`` (or ``master``), or ``worker`` 0 in a job without one: initialises the model (unless it finds it
  initialised, as after a restart), then trains.
* ``worker``: waits for the model, then trains. A trainer exits 0 once the global step reaches ``TRAIN_STEPS``:
  with a chief the job succeeds when the chief does, without one when worker 0 does.
* ``evaluator``: a side-car that trains nothing. It waits for the model, then every ``EVAL_EVERY_SECONDS``
  reports the current model's accuracy on held-out data, until it has seen the global step at ``TRAIN_STEPS``
  (exit 0) or is stopped (the job's end removes it). A PS that goes away is waited for.

Each task's server boots as the one task of a ``localhost`` job and opens its session with the PS tasks and
itself only (ClusterSpec propagation; docs/dynamic-workers.md says why), so no task waits for a task it does
not use: a worker does not wait for the evaluator, nor the other way round.

Environment: ``TRAIN_STEPS`` (default 300), ``TRAIN_LOG_EVERY`` (default 50), ``TRAIN_STEP_DELAY`` (seconds of
simulated input work before each step, default 0.02), ``EVAL_EVERY_SECONDS`` (default 2).

Output: ``step=<global step> <task>=<index> loss=<loss>`` at a trainer's first step and every
``TRAIN_LOG_EVERY`` global steps; ``eval step=<global step> accuracy=<accuracy>`` from the evaluator;
``event=...`` lines when a task starts serving or finishes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _number(name: str, default: float, kind: type = int) -> Any:
    raw = os.environ.get(name) or ""
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        sys.exit(f"ps_training.py: {name}={raw!r} is not {'an integer' if kind is int else 'a number'}")
    if value < 0 or (kind is int and value == 0):
        sys.exit(f"ps_training.py: {name}={raw!r} must be positive")
    return value


def tf_config() -> tuple[dict[str, dict[int, str]], str, int]:
    """(cluster as {job: {index: address}}, task type, task index); a job's tasks may be a list or a map."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        sys.exit("ps_training.py: TF_CONFIG is not set; run this program as a task of a distributed TFJob")
    config = json.loads(raw)
    cluster = {
        job: dict(enumerate(tasks)) if isinstance(tasks, list) else {int(i): a for i, a in tasks.items()}
        for job, tasks in config["cluster"].items()
    }
    task, index = str(config["task"]["type"]), int(config["task"]["index"])
    if index not in cluster.get(task, {}) or not cluster.get("ps"):
        sys.exit(f"ps_training.py: TF_CONFIG must list the PS tasks and task {task}:{index}")
    return cluster, task, index


def log(text: str) -> None:
    print(text, flush=True)


def main() -> int:
    steps = _number("TRAIN_STEPS", 300)
    log_every = _number("TRAIN_LOG_EVERY", 50)
    step_delay = _number("TRAIN_STEP_DELAY", 0.02, float)
    eval_every = _number("EVAL_EVERY_SECONDS", 2.0, float)
    cluster, task, index = tf_config()
    if task not in ("ps", "chief", "master", "worker", "evaluator"):
        sys.exit(f"ps_training.py: task type {task!r} has no role here")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    ps = cluster["ps"]
    if task == "ps":
        tf.distribute.Server(tf.train.ClusterSpec({"ps": ps}), job_name="ps", task_index=index)
        log(f"event=serving ps={index}")
        while True:
            time.sleep(3600)

    mine = cluster[task][index]
    server = tf.distribute.Server(tf.train.ClusterSpec({"localhost": [mine]}), job_name="localhost", task_index=0)
    session_cluster = tf.train.ClusterSpec({"ps": ps, task: {index: mine}})
    session_config = v1.ConfigProto(cluster_def=session_cluster.as_cluster_def())
    session_config.experimental.share_session_state_in_clusterspec_propagation = True

    device = f"/job:{task}/task:{index}"
    with v1.device(v1.train.replica_device_setter(worker_device=device, cluster=session_cluster)):
        global_step = v1.train.get_or_create_global_step()
        weights = v1.get_variable("weights", [2], initializer=v1.zeros_initializer())
        bias = v1.get_variable("bias", [], initializer=v1.zeros_initializer())

        def model(points: Any) -> tuple[Any, Any]:
            labels = tf.cast(points[:, 0] + 2.0 * points[:, 1] > 0.25, tf.float32)
            logits = tf.reduce_sum(points * weights, axis=1) + bias
            return labels, logits

        def accuracy_of(labels: Any, logits: Any) -> Any:
            return tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), labels), tf.float32))

        if task == "evaluator":
            held_out = tf.random.stateless_uniform([2000, 2], seed=[20, 21], minval=-1.0, maxval=1.0)
            accuracy = accuracy_of(*model(held_out))
        else:
            labels, logits = model(tf.random.uniform([128, 2], -1.0, 1.0))
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
            train = v1.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)

    ready_op = v1.report_uninitialized_variables()
    ready_op.mark_used()  # SessionManager runs it; TensorFlow's unused-result check cannot see that
    manager = v1.train.SessionManager(ready_op=ready_op, recovery_wait_secs=1)

    if task == "evaluator":
        while True:
            sess = manager.wait_for_session(server.target, config=session_config)
            try:
                while True:
                    step, acc = sess.run([global_step, accuracy])
                    log(f"eval step={step} accuracy={acc:.3f}")
                    if step >= steps:
                        log(f"event=finished evaluator={index} step={step}")
                        return 0
                    time.sleep(eval_every)
            except (tf.errors.UnavailableError, tf.errors.AbortedError) as exc:
                log(f"event=ps-lost evaluator={index} error={type(exc).__name__}: waiting for it")
                sess.close()

    initialiser = task in ("chief", "master") or (
        task == "worker" and index == 0 and not cluster.keys() & {"chief", "master"}
    )
    if initialiser:
        sess, ready = manager.recover_session(server.target, config=session_config)
        if not ready:
            sess.run(v1.global_variables_initializer())
            log(f"event=initialised {task}={index}")
    else:
        sess = manager.wait_for_session(server.target, config=session_config)
    step = sess.run(global_step)
    first = True
    while step < steps:
        time.sleep(step_delay)
        _, step, value = sess.run([train, global_step, loss])
        if first or step % log_every == 0:
            log(f"step={step} {task}={index} loss={value:.4f}")
            first = False
    log(f"event=finished {task}={index} step={step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
