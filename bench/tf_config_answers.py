#!/usr/bin/env python3
"""tf_config_answers.py: TensorFlow's own reading of TF_CONFIG, recorded.

For every case below, sets TF_CONFIG and asks TensorFlow's
TFConfigClusterResolver for the cluster (cluster_spec().as_dict()), the task
type, the task id, rpc_layer and environment, and writes what it answered
(or the error it raised) with the case to a JSON file. tests/test_cluster.c's
tf_config_as_tensorflow_reads_it parses every case with zactor and checks it
derives the same cluster, task type and index, or refuses the case where
"zactor" says it must (zactor's rules beyond TensorFlow's, each with why).

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/tf_config_answers.py [OUT.json]
  (default tests/data/tf_config_answers.json)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

A, B, C, D, E, F = ("host%d.example:%d" % (i, 2220 + i) for i in range(1, 7))

#  name, TF_CONFIG, and what zactor must do beside TensorFlow: "same" (derive
#  the same cluster, type and index) or "refuses: WHY".
CASES = [
    ("parameter_server_worker",
     {"cluster": {"chief": [A], "worker": [B, C], "ps": [D, E]},
      "task": {"type": "worker", "index": 1}}, "same"),
    ("parameter_server_chief",
     {"cluster": {"chief": [A], "worker": [B, C], "ps": [D]},
      "task": {"type": "chief", "index": 0}}, "same"),
    ("parameter_server_ps",
     {"cluster": {"chief": [A], "worker": [B], "ps": [D, E]},
      "task": {"type": "ps", "index": 1}}, "same"),
    ("evaluator_in_the_cluster",
     {"cluster": {"chief": [A], "worker": [B], "ps": [D], "evaluator": [F]},
      "task": {"type": "evaluator", "index": 0}}, "same"),
    ("evaluator_beside_the_cluster",
     {"cluster": {"chief": [A], "worker": [B], "ps": [D]},
      "task": {"type": "evaluator", "index": 0}}, "same"),
    ("multi_worker_mirrored",
     {"cluster": {"worker": [A, B, C]}, "task": {"type": "worker", "index": 2}}, "same"),
    ("multi_worker_mirrored_with_chief",
     {"cluster": {"chief": [A], "worker": [B, C]}, "task": {"type": "worker", "index": 0}},
     "same"),
    ("rpc_layer_and_environment",
     {"cluster": {"chief": [A], "worker": [B], "ps": [C]},
      "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc", "environment": "cloud"},
     "same"),
    ("environment_google",
     {"cluster": {"worker": [A, B]}, "task": {"type": "worker", "index": 1},
      "environment": "google", "rpc_layer": "grpc+loas"}, "same"),
    ("task_keys_beyond_type_and_index",
     {"cluster": {"chief": [A], "ps": [B]},
      "task": {"type": "chief", "index": 0, "trial": "1"}}, "same"),
    ("one_process_chief_only",
     {"cluster": {"chief": [A]}, "task": {"type": "chief", "index": 0}}, "same"),
    ("index_as_text",
     {"cluster": {"worker": [A, B]}, "task": {"type": "worker", "index": "1"}}, "same"),
    ("ps_without_a_chief",
     {"cluster": {"worker": [A, B], "ps": [C]}, "task": {"type": "worker", "index": 0}},
     "refuses: a cluster with ps needs a chief to initialise them (TensorFlow's "
     "ParameterServerStrategy needs one too, when it starts)"),
    ("one_address_twice",
     {"cluster": {"chief": [A], "worker": [A]}, "task": {"type": "chief", "index": 0}},
     "refuses: two tasks cannot listen on one address"),
    ("index_beyond_the_job",
     {"cluster": {"worker": [A, B]}, "task": {"type": "worker", "index": 2}},
     "refuses: worker 2 is not in the cluster"),
    ("unknown_job",
     {"cluster": {"chief": [A], "trainer": [B]}, "task": {"type": "chief", "index": 0}},
     "refuses: 'trainer' is none of TensorFlow's four jobs"),
]


def answer(config):
    os.environ["TF_CONFIG"] = json.dumps(config)
    try:
        r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = r.cluster_spec().as_dict()
        return {"cluster": {job: list(tasks) for job, tasks in sorted(spec.items())},
                "task_type": r.task_type, "task_id": r.task_id,
                "rpc_layer": r.rpc_layer, "environment": r.environment}
    except Exception as error:  # what TensorFlow raised is the answer
        return {"error": "%s: %s" % (type(error).__name__, error)}
    finally:
        del os.environ["TF_CONFIG"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "tf_config_answers.json")
    cases = []
    for name, config, zactor in CASES:
        tf_answer = answer(config)
        cases.append({"name": name, "tf_config": json.dumps(config), "tensorflow": tf_answer,
                      "zactor": zactor})
        print("%-34s TensorFlow: %s" % (name, json.dumps(tf_answer)))
    record = {"tensorflow": tf.__version__,
              "resolver": "tf.distribute.cluster_resolver.TFConfigClusterResolver",
              "cases": cases}
    with open(out, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print("%d cases, TensorFlow %s: %s" % (len(cases), tf.__version__, os.path.normpath(out)))


if __name__ == "__main__":
    main()
