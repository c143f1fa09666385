"""The Spark session's settings: the operator's files honoured, the driver's address routed to the
master, the executors' Python, the cluster's parallelism, each bad setting an InputError naming its
variable (through the asset too: the step fails once and publishes nothing), and an unreachable
master refused before any JVM starts."""

from __future__ import annotations

import re
import socket
import sys
import time

import pytest

from darkhaloscope.catalog.spark_conf import (
    SparkClusterError,
    master_kind,
    operator_conf,
    read_properties,
    route_address,
    spark_master,
    spark_session,
    spark_settings,
    standalone_endpoints,
    timeout_s,
)
from darkhaloscope.errors import InputError


@pytest.mark.parametrize(
    "master, kind",
    [
        ("local", "local"),
        ("local[*]", "local"),
        ("local[3]", "local"),
        ("local[2,4]", "local"),
        ("local-cluster[2,1,1024]", "local"),
        ("spark://10.0.0.5:7077", "standalone"),
        ("spark://a.example:7077,b.example:7078", "standalone"),
        ("spark://[::1]:7077", "standalone"),
        ("yarn", "yarn"),
        ("k8s://https://api.example:6443", "k8s"),
    ],
)
def test_master_kinds(master, kind):
    assert master_kind(master) == kind


@pytest.mark.parametrize(
    "master",
    ["local[0]", "local[x]", "spark://host", "spark://host:99999", "mesos://h:5050", "k8s://", "yarn-client", ""],
)
def test_a_bad_master_names_the_variable(master):
    with pytest.raises(InputError, match="DHS_SPARK_MASTER"):
        master_kind(master)


def test_standalone_endpoints_of_a_standby_list():
    assert standalone_endpoints("spark://m1:7077, m2:7078") == [("m1", 7077), ("m2", 7078)]


def test_properties_files_in_spark_defaults_format(tmp_path):
    f = tmp_path / "spark-defaults.conf"
    f.write_text(
        "# comment\n! another\n\nspark.executor.memory   4g\nspark.driver.host=10.1.2.3\nspark.a.b : c d \n"
        "spark.executor.extraJavaOptions -Dx=1 \\\n    -Dy=2\nspark.empty\n"
    )
    assert read_properties(f, "X") == {
        "spark.executor.memory": "4g",
        "spark.driver.host": "10.1.2.3",
        "spark.a.b": "c d",
        "spark.executor.extraJavaOptions": "-Dx=1 -Dy=2",
        "spark.empty": "",
    }


def test_a_bad_properties_file_names_the_file_the_line_and_the_variable(tmp_path):
    f = tmp_path / "bad.conf"
    f.write_text("spark.ok 1\nexecutor.memory 4g\n")
    with pytest.raises(InputError, match=r"bad.conf \(DHS_SPARK_CONF\) line 2"):
        read_properties(f, "DHS_SPARK_CONF")
    with pytest.raises(InputError, match=r"DHS_SPARK_CONF='.*missing.conf': no such Spark properties file"):
        operator_conf({"DHS_SPARK_CONF": str(tmp_path / "missing.conf")})


def test_the_named_file_overrides_spark_defaults_key_by_key(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.a 1\nspark.b 1\n")
    named = tmp_path / "dhs.conf"
    named.write_text("spark.b 2\nspark.c 2\n")
    both = operator_conf({"SPARK_CONF_DIR": str(conf_dir), "DHS_SPARK_CONF": str(named)})
    assert both == {"spark.a": "1", "spark.b": "2", "spark.c": "2"}
    # spark-submit's fallback: $SPARK_HOME/conf when SPARK_CONF_DIR is unset
    assert operator_conf({"SPARK_HOME": str(tmp_path)}) == {"spark.a": "1", "spark.b": "1"}
    assert operator_conf({}) == {}


def test_local_settings_keep_the_driver_on_loopback_and_take_parallelism_from_the_cores():
    s = spark_settings(env={"DHS_SPARK_MASTER": "local[3]"})
    assert s["spark.master"] == "local[3]"
    assert (s["spark.driver.host"], s["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert "spark.default.parallelism" not in s and s["spark.sql.shuffle.partitions"] == "3"
    assert s["spark.pyspark.python"] == sys.executable
    assert spark_settings(env={})["spark.master"] == "local[*]"


def test_a_standalone_driver_advertises_the_address_that_routes_to_the_master(monkeypatch):
    s = spark_settings(env={"DHS_SPARK_MASTER": "spark://127.0.0.1:7077"})
    assert s["spark.driver.host"] == s["spark.driver.bindAddress"] == "127.0.0.1"  # it binds where it advertises
    assert "spark.default.parallelism" not in s and "spark.sql.shuffle.partitions" not in s
    # yarn and k8s keep Spark's own default (the host name)
    assert not {"spark.driver.host", "spark.driver.bindAddress"} & set(spark_settings(env={"DHS_SPARK_MASTER": "yarn"}))


def test_route_address_asks_the_kernel():
    assert route_address("127.0.0.1", 7077) == "127.0.0.1"
    with pytest.raises(SparkClusterError, match="does not resolve"):
        route_address("no-such-host.invalid", 7077)


def test_precedence_ours_then_the_operator_then_the_environment_then_the_caller(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.master spark://10.9.9.9:7077\nspark.driver.host 10.1.1.1\n"
        "spark.pyspark.python /opt/py/bin/python\nspark.ui.enabled true\n"
        "spark.sql.shuffle.partitions 400\n"
    )
    env = {"SPARK_CONF_DIR": str(conf_dir)}
    s = spark_settings(env=env)  # the file's master and driver host; no routing question asked of 10.9.9.9
    assert (s["spark.master"], s["spark.driver.host"], s["spark.pyspark.python"], s["spark.ui.enabled"]) == (
        "spark://10.9.9.9:7077",
        "10.1.1.1",
        "/opt/py/bin/python",
        "true",
    )
    assert s["spark.sql.shuffle.partitions"] == "400"
    assert spark_master(env) == "spark://10.9.9.9:7077"
    s = spark_settings(
        env={
            **env,
            "DHS_SPARK_MASTER": "local[2]",
            "DHS_SPARK_DRIVER_HOST": "10.2.2.2",
            "DHS_SPARK_PYTHON": "/venv/bin/python",
        }
    )
    assert (s["spark.master"], s["spark.driver.host"], s["spark.pyspark.python"]) == (
        "local[2]",
        "10.2.2.2",
        "/venv/bin/python",
    )
    assert s["spark.sql.shuffle.partitions"] == "400"  # the operator's, not the local cores
    assert s["spark.driver.bindAddress"] == "10.2.2.2"  # the driver binds where it advertises
    s = spark_settings("local[1]", conf={"spark.ui.enabled": "false"}, env=env)
    assert (s["spark.master"], s["spark.ui.enabled"]) == ("local[1]", "false")
    (conf_dir / "spark-defaults.conf").write_text("spark.driver.host 203.0.113.9\nspark.driver.bindAddress 0.0.0.0\n")
    s = spark_settings(env={**env, "DHS_SPARK_MASTER": "spark://127.0.0.1:7077"})  # a NAT: advertise one, bind all
    assert (s["spark.driver.host"], s["spark.driver.bindAddress"]) == ("203.0.113.9", "0.0.0.0")


@pytest.mark.parametrize("raw", ["0", "-5", "abc", "nan", "1e9", "3"])
def test_a_bad_timeout_names_the_variable(raw):
    with pytest.raises(InputError, match="DHS_SPARK_TIMEOUT_S"):
        timeout_s({"DHS_SPARK_TIMEOUT_S": raw})
    assert timeout_s({}) == 120.0 and timeout_s({"DHS_SPARK_TIMEOUT_S": " 30 "}) == 30.0


def test_an_unreachable_master_fails_at_once_naming_it():
    """Nothing listens on the port: the session is refused before a JVM starts, with the master's
    address and the variable in the message (Spark alone would retry for a minute)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        t0 = time.monotonic()
        expected = rf"spark://127.0.0.1:{port} \(DHS_SPARK_MASTER\) is unreachable: 127.0.0.1:{port}"
        with pytest.raises(SparkClusterError, match=expected):
            spark_session(env={"DHS_SPARK_MASTER": f"spark://127.0.0.1:{port}"})
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "variable, value, expected",
    [
        ("DHS_SPARK_MASTER", "spark//typo:7077", "DHS_SPARK_MASTER"),
        (
            "DHS_SPARK_CONF",
            "/nonexistent/spark.conf",
            "DHS_SPARK_CONF='/nonexistent/spark.conf': no such Spark properties",
        ),
        ("DHS_SPARK_TIMEOUT_S", "soon", "DHS_SPARK_TIMEOUT_S='soon'"),
    ],
)
def test_a_bad_setting_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys, variable, value, expected):
    """The settings are validated before planning (``resources/settings.py``): ``dhs`` exits 2 naming
    the variable, no session is started and nothing is written."""
    from dhs.main import main
    from resources.settings import validate

    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with pytest.raises(InputError, match=re.escape(expected)):
        validate()
    assert main(["materialize", "negatives"]) == 2
    assert expected in capsys.readouterr().err and not (tmp_path / "lake").exists()


def test_task_progress_follows_the_tasks_of_its_job_group_to_the_end(spark):
    """Four tasks that each take a while: the reports count completed tasks, never fall, and the
    last is every task done; a job outside the block is not in the group."""
    from darkhaloscope.catalog.spark_conf import _group_tasks, task_progress

    reports = []

    def slow(rows):
        time.sleep(0.3)
        yield sum(rows)

    with task_progress(spark, "progress-test", lambda done, total: reports.append((done, total)), interval_s=0.05):
        spark.sparkContext.parallelize(range(8), 4).mapPartitions(slow).collect()
    spark.sparkContext.parallelize(range(4), 2).count()
    assert reports and reports[-1] == (4, 4)
    assert [d for d, _ in reports] == sorted(d for d, _ in reports)
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
    assert _group_tasks(spark.sparkContext, "progress-test") == (4, 4)
