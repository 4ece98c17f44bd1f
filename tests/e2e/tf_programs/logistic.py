"""A second dynamic-worker training program, written apart from examples/dynamic-workers/train.py: logistic
regression with Adam (whose slot variables live on the PS as well), session set-up by TensorFlow's own
``SessionManager`` (recover an initialised model, else the initialising task initialises it, else wait for it),
no thread, TensorFlow's default SIGTERM behaviour. Same contract: TF_CONFIG of either form, PS tasks serve,
worker 0 initialises and ends training at ``LOGISTIC_STEPS``.

Prints ``[<task> <index>] global_step <n> accuracy <a>`` after its first step and every 25 global steps.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
v1.disable_eager_execution()

config = json.loads(os.environ["TF_CONFIG"])
me = config["task"]["type"], int(config["task"]["index"])


def addresses(tasks):
    return dict(enumerate(tasks)) if isinstance(tasks, list) else {int(i): a for i, a in tasks.items()}


ps = addresses(config["cluster"]["ps"])
mine = addresses(config["cluster"][me[0]])[me[1]]

if me[0] == "ps":
    tf.distribute.Server({"ps": ps}, job_name="ps", task_index=me[1])
    print(f"[ps {me[1]}] serving", flush=True)
    while True:
        time.sleep(3600)

# Propagated cluster: the PS tasks and this task, under its own job name; the server boots as `localhost`.
server = tf.distribute.Server({"localhost": [mine]}, job_name="localhost", task_index=0)
cluster = tf.train.ClusterSpec({"ps": ps, me[0]: {me[1]: mine}})
session_config = v1.ConfigProto(cluster_def=cluster.as_cluster_def())
session_config.experimental.share_session_state_in_clusterspec_propagation = True

with v1.device(v1.train.replica_device_setter(worker_device=f"/job:{me[0]}/task:{me[1]}", cluster=cluster)):
    global_step = v1.train.get_or_create_global_step()
    points = tf.random.uniform([128, 2], -1.0, 1.0)
    labels = tf.cast(points[:, 0] + 2.0 * points[:, 1] > 0.25, tf.float32)
    weights = v1.get_variable("weights", [2], initializer=v1.zeros_initializer())
    bias = v1.get_variable("bias", [], initializer=v1.zeros_initializer())
    logits = tf.reduce_sum(points * weights, axis=1) + bias
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), labels), tf.float32))
    train = v1.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)

ready_op = v1.report_uninitialized_variables()
ready_op.mark_used()  # SessionManager runs it; TensorFlow's unused-result check cannot see that
manager = v1.train.SessionManager(ready_op=ready_op, recovery_wait_secs=1)
if me == ("worker", 0) or me[0] == "chief":
    sess, ready = manager.recover_session(server.target, config=session_config)
    if not ready:
        sess.run(v1.global_variables_initializer())
else:
    sess = manager.wait_for_session(server.target, config=session_config)

target = int(os.environ.get("LOGISTIC_STEPS", "100000"))
first = True
step = sess.run(global_step)
while step < target:
    time.sleep(0.05)
    _, step, acc = sess.run([train, global_step, accuracy])
    if first or step % 25 == 0:
        print(f"[{me[0]} {me[1]}] global_step {step} accuracy {acc:.2f}", flush=True)
        first = False
sys.exit(0)
