package io.dspark.vllm.flink;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.catalog.ObjectIdentifier;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.TypeConversions;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The plan {@code connector.flink.planner} made for one table (see its module docstring for the fields). */
final class TablePlan {

    final JsonNode json;
    final ObjectIdentifier identifier; // the table it was made for

    /** The plan's layout: {@code connector.flink.contract.PLAN_VERSION}. */
    static final int VERSION = io.dspark.vllm.request.PlanContract.PLAN_VERSION;

    TablePlan(JsonNode json, ObjectIdentifier identifier) {
        int version = json.path("version").asInt(-1);
        if (version != VERSION) {
            throw new IllegalArgumentException(
                    "dspark-vllm: the planner made a plan of version " + version + ", this jar reads version "
                            + VERSION + ": the Python package and the jar on the classpath are of different "
                            + "releases; use the jar of the installed package ('dspark-vllm sql --jar')");
        }
        this.json = json;
        this.identifier = identifier;
    }

    String mode() {
        return json.get("mode").asText();
    }

    boolean bounded() {
        return json.get("bounded").asBoolean();
    }

    JsonNode source() {
        return json.get("source");
    }

    JsonNode request() {
        return json.get("request");
    }

    /** Flat column name -> Flink SQL type, in the parse function's order (profile columns, then internal). */
    Map<String, String> flatTypes() {
        Map<String, String> types = new LinkedHashMap<>();
        for (JsonNode column : json.get("flat")) {
            types.put(column.get("name").asText(), column.get("type").asText());
        }
        return types;
    }

    /** What the parse function makes beside the profile's columns ({@code contract.PARSE_INTERNAL}). */
    java.util.Set<String> parseInternal() {
        java.util.Set<String> names = new java.util.LinkedHashSet<>();
        json.get("parse_internal").forEach(n -> names.add(n.asText()));
        return names;
    }

    /** The columns the native core makes (the plan's {@code native} part) and their types, in its order. */
    static Map<String, LogicalType> madeTypes(JsonNode jvm) {
        Map<String, LogicalType> made = new LinkedHashMap<>();
        for (int k = 0; k < jvm.get("columns").size(); k++) {
            made.put(jvm.get("columns").get(k).asText(), dataType(jvm.get("types").get(k).asText()).getLogicalType());
        }
        return made;
    }

    /**
     * Null when the parse step can run in the JVM for these flat columns (the plan has a "native" part: the
     * backend is cpu, or auto where no GPU backend is installed, and the native core makes every column read),
     * else why it runs in Python.
     */
    String pythonParseReason(java.util.Collection<String> produced) {
        JsonNode jvm = json.get("native");
        if (jvm == null || !jvm.has("document")) {
            return jvm == null ? "the plan has no native parse step" : jvm.path("why").asText();
        }
        java.util.Set<String> made = new java.util.HashSet<>(parseInternal());
        jvm.get("columns").forEach(n -> made.add(n.asText()));
        List<String> others = new ArrayList<>();
        for (String name : produced) {
            if (!made.contains(name)) {
                others.add(name);
            }
        }
        return others.isEmpty()
                ? null
                : "the query reads " + others + ", which the native core does not make";
    }

    JsonNode physical(String column) {
        return json.get("physical").get(column);
    }

    /** Readable metadata key -> its type, in the registry's order. */
    Map<String, DataType> metadataTypes() {
        Map<String, DataType> types = new LinkedHashMap<>();
        for (JsonNode key : json.get("metadata")) {
            types.put(key.get("key").asText(), dataType(key.get("type").asText()));
        }
        return types;
    }

    /** A readable metadata key's entry: its type, its SQL and its layout ({@code from}). */
    JsonNode metadata(String key) {
        for (JsonNode entry : json.get("metadata")) {
            if (entry.get("key").asText().equals(key)) {
                return entry;
            }
        }
        throw new IllegalArgumentException("unknown metadata key " + key);
    }

    Map<String, String> settings() {
        Map<String, String> settings = new LinkedHashMap<>();
        json.get("settings").fields().forEachRemaining(e -> settings.put(e.getKey(), e.getValue().asText()));
        return settings;
    }

    List<String[]> pairs(JsonNode array) {
        List<String[]> pairs = new ArrayList<>();
        for (JsonNode pair : array) {
            pairs.add(new String[] {pair.get(0).asText(), pair.get(1).asText()});
        }
        return pairs;
    }

    static DataType dataType(String sql) {
        LogicalType logical = LogicalTypeParser.parse(sql, TablePlan.class.getClassLoader());
        return TypeConversions.fromLogicalToDataType(logical);
    }

    static DataType row(Map<String, String> fields) {
        List<DataTypes.Field> list = new ArrayList<>();
        fields.forEach((name, type) -> list.add(DataTypes.FIELD(name, dataType(type))));
        return DataTypes.ROW(list.toArray(new DataTypes.Field[0]));
    }
}
