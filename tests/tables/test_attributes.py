"""Topic attributes: RocketMQ 5's ``+key=value,-key`` syntax, the table settings they hold, and their errors."""

from __future__ import annotations

import pytest

from sparkmq.errors import InvalidFieldError
from sparkmq.tables import attributes as A
from sparkmq.tables import layout


def test_the_names_are_the_layouts() -> None:
    assert (A.ENABLE, A.FORMAT, A.SCHEMA, A.PARTITION_BY) == layout.TABLE_ATTRIBUTES
    assert A.STORE_DATE == layout.STORE_DATE_PARTITION


def test_a_modification_keeps_the_commas_of_a_ddl() -> None:
    parsed = A.parse_modification("+table.enable=true,+table.format=json,+table.schema=id BIGINT, amount DECIMAL(10,2)")
    assert parsed == {
        "+table.enable": "true",
        "+table.format": "json",
        "+table.schema": "id BIGINT, amount DECIMAL(10,2)",
    }
    settings = A.TableSettings.of({key[1:]: value for key, value in parsed.items()})
    assert settings == A.TableSettings(True, "json", (("id", "bigint"), ("amount", "decimal(10,2)")), None)
    assert A.parse_modification(A.render_modification({"table.enable": "true"})) == {"+table.enable": "true"}


def test_create_adds_update_adds_replaces_and_deletes() -> None:
    created = A.alter(True, {}, A.parse_modification("+table.enable=true"))
    assert created == {"table.enable": "true"}
    updated = A.alter(
        False, created, A.parse_modification("+table.enable=false,+table.partitionBy=date(storeTimestamp)")
    )
    assert updated == {"table.enable": "false", "table.partitionBy": "date(storeTimestamp)"}
    assert A.alter(False, updated, A.parse_modification("-table.partitionBy")) == {"table.enable": "false"}
    assert A.alter(False, updated, {}) == updated


@pytest.mark.parametrize(
    ("create", "current", "text", "remark"),
    [
        (False, {}, "table.enable=true", "wrong format attribute 'table.enable=true'"),
        (False, {}, "+table.enable", "attribute table.enable needs a value"),
        (False, {}, "+table.enable=true,-table.enable", "alter duplication key. key: table.enable"),
        (False, {}, "+table.enabled=true", "unsupported key: table.enabled"),
        (True, {}, "-table.enable", "only add attribute is supported while creating topic"),
        (False, {}, "-table.format", "attempt to delete a nonexistent key: table.format"),
        (False, {}, "+table.enable=yes", "bad table.enable value 'yes'"),
        (False, {}, "+table.format=avro", "bad table.format value 'avro'"),
        (False, {}, "+table.format=json", "table.format=json needs table.schema"),
        (False, {}, "+table.schema=id", "bad table.schema column 'id'"),
        (False, {}, "+table.schema=id BIGINTEGER", "unsupported type 'BIGINTEGER' of column id"),
        (False, {}, "+table.schema=id INT, id STRING", "column id declared twice"),
        (False, {}, "+table.partitionBy=nope", "bad table.partitionBy value 'nope'"),
    ],
)
def test_bad_modifications_are_named(create: bool, current: dict[str, str], text: str, remark: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        A.alter(create, current, A.parse_modification(text))
    assert remark in str(caught.value) and caught.value.field == "attributes"
