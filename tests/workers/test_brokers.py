"""How the apps are configured for each broker: RabbitMQ's quorum or classic queues, and Redis behind
Sentinel (URLs, what Celery is given, the clients toolfleet makes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workers.app import make_app, make_publisher
from workers.calls.retry import retry_delay_s
from workers.errors import SettingsError
from workers.priorities import MAX_PRIORITY, broker_priority
from workers.redis_client import celery_url, connect, is_redis, parse_sentinel_url
from workers.runtime._backend import ResultBackend, SentinelResultBackend
from workers.runtime._consumer import Consumer
from workers.settings import Settings, redact_url

RABBIT = "amqp://guest:guest@rabbit.internal:5672//"
SENTINELS = "sentinel://:pw@10.0.0.1:26379;sentinel://10.0.0.2:26380;sentinel://10.0.0.3/2?master_name=fleet"


def _on(broker_url: str, **changes: object) -> Settings:
    return Settings(broker_url=broker_url, **changes)  # type: ignore[arg-type]


# -- RabbitMQ ---------------------------------------------------------------------------------------


def test_a_pools_queue_on_rabbitmq_is_a_quorum_queue_on_a_topic_exchange_by_default() -> None:
    for app in (make_app(_on(RABBIT)), make_publisher(_on(RABBIT))):
        queue = app.amqp.queues["heavy"]  # a pool's queue, made as the first call to it makes it
        assert queue.queue_arguments == {"x-queue-type": "quorum"}  # no x-max-priority: refused there
        assert queue.exchange.type == "topic"  # native delayed delivery needs one that is not direct
        assert app.amqp.queues["default"].queue_arguments == {"x-queue-type": "quorum"}
        assert app.conf.broker_transport_options["confirm_publish"] is True


def test_a_workers_events_are_published_without_the_confirms_its_calls_wait_for() -> None:
    # The worker's event loop reads the events' connection; a pool thread waiting there for a confirm
    # lost it to the loop and held the events' lock forever (the worker stopped consuming)
    app = make_app(_on(RABBIT))
    consumer = SimpleNamespace(app=app, ensure_connected=lambda connection: connection)
    events = Consumer.connection_for_write(consumer, heartbeat=60)  # what Celery's Events step calls
    calls = app.connection_for_write()  # what a retry or a compensation is published on
    assert events.transport_options["confirm_publish"] is False
    assert events.heartbeat == 60
    assert calls.transport_options["confirm_publish"] is True
    assert app.conf.worker_consumer == "workers.runtime._consumer:Consumer"


def test_classic_queues_on_rabbitmq_keep_their_priorities() -> None:
    app = make_app(_on(RABBIT, broker_queue_type="classic"))
    queue = app.amqp.queues["heavy"]
    assert queue.queue_arguments == {"x-max-priority": MAX_PRIORITY}
    assert app.conf.broker_transport_options["confirm_publish"] is True


def test_redis_brokers_are_untouched_by_the_queue_type() -> None:
    app = make_app(Settings())
    assert app.amqp.queues["heavy"].queue_arguments == {"x-max-priority": MAX_PRIORITY}
    assert app.conf.broker_transport is None  # kombu's own, from the URL's scheme
    assert "confirm_publish" not in app.conf.broker_transport_options


def test_an_unknown_queue_type_is_refused_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="TOOLFLEET_BROKER_QUEUE_TYPE must be one of quorum, classic"):
        Settings.from_env({"TOOLFLEET_BROKER_QUEUE_TYPE": "stream"})


@pytest.mark.parametrize("attempt", range(6))
def test_retries_on_quorum_queues_wait_whole_seconds_and_at_least_one(attempt: int) -> None:
    # RabbitMQ's native delayed delivery counts whole seconds and refuses a delay under one
    for _ in range(20):
        delay = retry_delay_s(attempt, _on(RABBIT, retry_backoff_s=0.2, retry_backoff_max_s=5))
        assert delay >= 1 and delay == int(delay)
        assert delay <= 5


def test_retries_elsewhere_keep_their_fractional_backoff() -> None:
    for settings in (_on(RABBIT, broker_queue_type="classic"), Settings()):
        delays = {retry_delay_s(0, settings) for _ in range(20)}
        assert all(0.1 <= d <= 0.2 for d in delays) and len(delays) > 1


# -- Redis behind Sentinel --------------------------------------------------------------------------


def test_a_sentinel_url_names_its_sentinels_group_database_and_password() -> None:
    target = parse_sentinel_url(SENTINELS)
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("10.0.0.3", 26379))
    assert (target.master_name, target.db, target.password) == ("fleet", 2, "pw")
    assert parse_sentinel_url("sentinel://h").master_name == "mymaster"
    with pytest.raises(ValueError, match="no sentinel named"):
        parse_sentinel_url(" ")


def test_a_semicolon_in_a_password_is_not_taken_for_another_sentinel() -> None:
    target = parse_sentinel_url("sentinel://:p;w@h1:26379;sentinel://h2:26379/1")
    assert (target.password, target.sentinels) == ("p;w", (("h1", 26379), ("h2", 26379)))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sentinel://h:26379;redis://h:6379/0", "every part must start with sentinel://"),
        ("sentinel://h:port", "has no valid port"),
        ("sentinel://h/zero", "the database must be a number"),
        ("sentinel://h?master=x", "unknown parameter 'master'"),
        ("sentinel://h?master_name=", "master_name is empty"),
        ("sentinel://h1;sentinel://", "a sentinel without a host"),
    ],
)
def test_a_malformed_sentinel_url_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_sentinel_url(url)
    with pytest.raises(SettingsError, match=r"TOOLFLEET_REDIS_URL=.* is not a Redis URL"):
        Settings.from_env({"TOOLFLEET_REDIS_URL": url})


def test_celery_is_given_the_url_without_its_query_and_the_group_as_a_transport_option() -> None:
    url, options = celery_url(SENTINELS)
    assert url == "sentinel://:pw@10.0.0.1:26379;sentinel://10.0.0.2:26380;sentinel://10.0.0.3/2"
    assert options["master_name"] == "fleet"
    assert celery_url("redis://h:6379/0") == ("redis://h:6379/0", {})


def test_apps_on_sentinel_follow_the_master_with_toolfleets_transport_and_backend() -> None:
    settings = Settings.from_env({"TOOLFLEET_REDIS_URL": SENTINELS})
    app = make_app(settings)
    assert app.connection_for_write().transport_cls == "sentinel"  # kombu's own, from the URL's scheme
    assert app.conf.broker_transport_options["master_name"] == "fleet"
    assert app.conf.broker_transport_options["priority_steps"] == list(range(MAX_PRIORITY + 1))
    assert app.conf.result_backend_transport_options["master_name"] == "fleet"
    assert app.backend_cls is SentinelResultBackend and issubclass(SentinelResultBackend, ResultBackend)
    assert "master_name" not in str(app.conf.broker_url) and "master_name" not in str(app.conf.result_backend)
    publisher = make_publisher(settings)
    assert publisher.conf.broker_transport_options["master_name"] == "fleet"


def test_a_sentinel_broker_reads_priorities_as_redis_does() -> None:
    assert is_redis(SENTINELS)
    assert broker_priority(9, SENTINELS) == broker_priority(9, "redis://h") != broker_priority(9, RABBIT)


def test_a_sentinel_client_asks_the_named_group_of_the_named_sentinels() -> None:
    client = connect(SENTINELS, socket_timeout=3)
    pool = client.connection_pool
    assert pool.service_name == "fleet"  # type: ignore[attr-defined]
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]  # type: ignore[attr-defined]
    assert [(k["host"], k["port"]) for k in sentinels] == [
        ("10.0.0.1", 26379),
        ("10.0.0.2", 26380),
        ("10.0.0.3", 26379),
    ]
    assert pool.connection_kwargs["db"] == 2 and pool.connection_kwargs["password"] == "pw"
    assert pool.connection_kwargs["socket_timeout"] == 3
    client.close()


def test_every_password_of_a_sentinel_url_is_redacted() -> None:
    assert redact_url("sentinel://:a@h1;sentinel://:b@h2/0?master_name=m") == (
        "sentinel://:***@h1;sentinel://:***@h2/0?master_name=m"
    )
