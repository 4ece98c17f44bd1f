"""A parameter-server program that resumes from its own checkpoint when a PS is lost, written apart from
examples/dynamic-workers/train.py: linear regression with momentum (whose slot variables live on the PS
too), one training loop without threads, and a checkpoint of its own making: worker 0 (or the chief) reads
every variable's value into NumPy, writes them as one ``.npz`` file in the scratch directory, reads that
file back to check it, copies it into the checkpoint directory under a temporary name and renames it into
place, so a checkpoint file is either whole or absent. The two newest are kept.

Volumes (each must be a mount point, or the program exits 2 with one line on stderr):

``PSC_CHECKPOINT_DIR``  the checkpoints; a volume that outlives the pods (checked by worker 0 / the chief)
``PSC_SCRATCH_DIR``     where a checkpoint is assembled; an emptyDir (checked by worker 0 / the chief)
the program's own directory: a ConfigMap volume (checked by every task)

Other settings: ``PSC_STEPS`` (global step at which training ends, default 100000),
``PSC_CHECKPOINT_SECONDS`` (time between two checkpoints, default 2), ``PSC_STEP_DELAY`` (default 0.02).

When a PS dies every worker's step fails; each opens a new session (which waits until the PS is back at its
address). Worker 0 initialises the fresh variables, loads the newest checkpoint into them and then stores
the step it restored in ``restored_step``, a variable on the PS that initialisation sets to -1: the other
workers train only once it is not negative.

Prints ``[<task> <index>] ...`` lines: ``global_step <n> loss <l>``, ``checkpoint step <n> <file> <seconds>s``,
``ps lost <error type>``, ``reconnected``, ``restored step <n> <file>``, ``fresh start``, ``done step <n>``.
"""

import glob
import json
import os
import sys
import time

EXIT_REFUSED = 2


def refuse(message):
    print(f"ps_checkpoint.py: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_REFUSED)


def mount_points():
    """Every mount point of this process's mount namespace, from /proc/self/mountinfo (octal escapes decoded)."""
    points = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        for line in table:
            field = line.split()[4]
            points.add(field.encode().decode("unicode_escape"))
    return points


def is_mount(path):
    # os.path.ismount compares devices: a bind mount of a directory of the same file system (how a
    # kubelet can mount a hostPath or local volume) shares its parent's device and is missed.
    return os.path.ismount(path) or os.path.realpath(path) in mount_points()


config = json.loads(os.environ.get("TF_CONFIG") or "{}")
try:
    role, index = config["task"]["type"], int(config["task"]["index"])
except (KeyError, TypeError, ValueError):
    refuse("TF_CONFIG names no task")
writer = role == "chief" or (role == "worker" and index == 0)

# Not realpath: a ConfigMap volume's files are symbolic links into a hidden directory inside the mount.
program_dir = os.path.dirname(os.path.abspath(__file__))
needed = {"the program's directory": program_dir}
if writer:
    needed["PSC_CHECKPOINT_DIR"] = os.environ.get("PSC_CHECKPOINT_DIR", "")
    needed["PSC_SCRATCH_DIR"] = os.environ.get("PSC_SCRATCH_DIR", "")
for what, path in needed.items():
    if not path:
        refuse(f"{what} is not set")
    if not os.path.isdir(path) or not is_mount(path):
        refuse(f"{what} {path} is not a mounted volume")
checkpoint_dir = needed.get("PSC_CHECKPOINT_DIR")
scratch_dir = needed.get("PSC_SCRATCH_DIR")
steps = int(os.environ.get("PSC_STEPS", "100000"))
every = float(os.environ.get("PSC_CHECKPOINT_SECONDS", "2"))
delay = float(os.environ.get("PSC_STEP_DELAY", "0.02"))
me = f"[{role} {index}]"


def say(text):
    print(f"{me} {text}", flush=True)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
v1.disable_eager_execution()


def addresses(tasks):
    return dict(enumerate(tasks)) if isinstance(tasks, list) else {int(i): a for i, a in tasks.items()}


ps = addresses(config["cluster"]["ps"])
if role == "ps":
    tf.distribute.Server({"ps": ps}, job_name="ps", task_index=index)
    say("serving")
    while True:
        time.sleep(3600)

own = addresses(config["cluster"][role])[index]
server = tf.distribute.Server({"localhost": [own]}, job_name="localhost", task_index=0)
cluster = tf.train.ClusterSpec({"ps": ps, role: {index: own}})
session_config = v1.ConfigProto(cluster_def=cluster.as_cluster_def())
session_config.experimental.share_session_state_in_clusterspec_propagation = True

with v1.device(v1.train.replica_device_setter(worker_device=f"/job:{role}/task:{index}", cluster=cluster)):
    global_step = v1.train.get_or_create_global_step()
    inputs = tf.random.normal([32, 8])
    targets = tf.reduce_sum(inputs * tf.range(1.0, 9.0), axis=1, keepdims=True) - 3.0
    weights = v1.get_variable("linear/w", [8, 1], initializer=v1.zeros_initializer())
    bias = v1.get_variable("linear/b", [1], initializer=v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(inputs, weights) + bias - targets))
    train = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=global_step)
    restored_step = v1.get_variable(
        "restored_step", [], tf.int64, initializer=v1.constant_initializer(-1), trainable=False
    )

state = [v for v in v1.global_variables() if v is not restored_step]  # the model, its slots, the step
read_state = {v.op.name: v.read_value() for v in state}
load_state = {}
for v in state:
    value = v1.placeholder(v.dtype.base_dtype, v.shape)
    load_state[v.op.name] = (value, v.assign(value))
restored_value = v1.placeholder_with_default(tf.constant(0, tf.int64), [])
mark_restored = restored_step.assign(restored_value)
missing = v1.report_uninitialized_variables()
initialise = v1.global_variables_initializer()


def checkpoints():
    """The published checkpoint files, oldest first (by the global step in their name)."""
    files = glob.glob(os.path.join(checkpoint_dir, "model-*.npz"))
    return sorted(files, key=lambda f: int(os.path.basename(f)[len("model-") : -len(".npz")]))


def save(sess):
    started = time.monotonic()
    values = sess.run(read_state)
    step = int(values[global_step.op.name])
    name = f"model-{step}.npz"
    draft = os.path.join(scratch_dir, name)
    np.savez(draft, **values)
    with np.load(draft) as check:  # a file that does not read back whole is never published
        if sorted(check.files) != sorted(values):
            raise OSError(f"{draft} reads back as {check.files}")
    incoming = os.path.join(checkpoint_dir, f".{name}.incoming")
    with open(draft, "rb") as source, open(incoming, "wb") as target:
        target.write(source.read())
        target.flush()
        os.fsync(target.fileno())
    os.replace(incoming, os.path.join(checkpoint_dir, name))
    directory = os.open(checkpoint_dir, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash of the node
    finally:
        os.close(directory)
    os.remove(draft)
    for old in checkpoints()[:-2]:
        os.remove(old)
    say(f"checkpoint step {step} {name} {time.monotonic() - started:.3f}s")
    return step


def restore(sess):
    sess.run(initialise)
    newest = (checkpoints() or [None])[-1]
    if newest is None:
        sess.run(mark_restored)
        say("fresh start")
        return
    with np.load(newest) as saved:
        feeds = {load_state[name][0]: saved[name] for name in load_state}
    sess.run([op for _, op in load_state.values()], feed_dict=feeds)
    step = sess.run(global_step)
    sess.run(mark_restored, feed_dict={restored_value: step})
    say(f"restored step {step} {os.path.basename(newest)}")


def ready(sess):
    """Make (writer) or wait for a model that is initialised and restored."""
    while True:
        if len(sess.run(missing)) == 0 and sess.run(restored_step) >= 0:
            return
        if writer:
            restore(sess)
            return
        time.sleep(0.5)


lost = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError, tf.errors.InternalError)
lost += (tf.errors.FailedPreconditionError,)
reconnecting = False
step = 0
while step < steps:
    try:
        with v1.Session(server.target, config=session_config) as sess:
            if reconnecting:
                sess.run(missing)  # blocks until the PS answers again
                say("reconnected")
            ready(sess)
            last_save = time.monotonic()
            first = True
            while step < steps:
                time.sleep(delay)
                _, value, step = sess.run([train, loss, global_step])
                if first or step % 25 == 0:
                    say(f"global_step {step} loss {value:.4f}")
                    first = False
                if writer and time.monotonic() - last_save >= every:
                    save(sess)
                    last_save = time.monotonic()
            if writer:
                save(sess)
    except lost as error:
        say(f"ps lost {type(error).__name__}")
        reconnecting = True
        time.sleep(1)
say(f"done step {step}")
