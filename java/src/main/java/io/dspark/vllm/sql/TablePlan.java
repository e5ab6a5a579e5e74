package io.dspark.vllm.sql;

import io.dspark.vllm.engine.SqlTypes;
import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;

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

/**
 * The plan {@code connector.plan} made for one table: its record ({@link Plan.Table}, generated with its
 * reader from connector/plan/records.py, which checks its version and keys), and what the factory asks of it.
 */
final class TablePlan {

    final Plan.Table plan;
    final ObjectIdentifier identifier; // the table it was made for
    final JsonNode json; // as the planner wrote it: sent back to plan what the native core reads for a scan

    /** The plan's layout: {@code connector.plan.contract.PLAN_VERSION}. */
    static final int VERSION = Plan.PLAN_VERSION;

    TablePlan(JsonNode json, ObjectIdentifier identifier) {
        this.plan = PlanReader.readTable(json);
        this.identifier = identifier;
        this.json = json;
    }

    String mode() {
        return plan.mode;
    }

    boolean bounded() {
        return plan.bounded;
    }

    Plan.Source source() {
        return plan.source;
    }

    /** The request step, or null (replay). */
    Plan.TableRequest request() {
        return plan.request;
    }

    /** Flat column name -> Flink SQL type, in the parse function's order (profile columns, then internal). */
    Map<String, String> flatTypes() {
        Map<String, String> types = new LinkedHashMap<>();
        for (Plan.Column column : plan.flat) {
            types.put(column.name, column.type);
        }
        return types;
    }

    /** What the parse function makes beside the profile's columns ({@code contract.PARSE_INTERNAL}). */
    java.util.Set<String> parseInternal() {
        return new java.util.LinkedHashSet<>(plan.parseInternal);
    }

    /**
     * Null when the parse step runs in the JVM for these flat columns (the plan gives no reason for Python: the
     * backend is cpu, or auto where the job's configuration declares no GPU TaskManagers, and the native core
     * makes every column read), else why it runs in Python.
     */
    String pythonParseReason(java.util.Collection<String> produced) {
        Plan.NativeParse jvm = plan.nativeValue;
        if (jvm.why != null || jvm.columns == null) {
            return jvm.why == null ? "the plan has no native parse step" : jvm.why;
        }
        java.util.Set<String> made = new java.util.HashSet<>(parseInternal());
        made.addAll(jvm.columns);
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

    Plan.Physical physical(String column) {
        return plan.physical.get(column);
    }

    /** Readable metadata key -> its type, in the registry's order. */
    Map<String, DataType> metadataTypes() {
        Map<String, DataType> types = new LinkedHashMap<>();
        for (Plan.MetadataKey key : plan.metadata) {
            types.put(key.key, SqlTypes.dataType(key.type));
        }
        return types;
    }

    /** A readable metadata key's entry: its type and its layout ({@code from}). */
    Plan.MetadataKey metadata(String key) {
        for (Plan.MetadataKey entry : plan.metadata) {
            if (entry.key.equals(key)) {
                return entry;
            }
        }
        throw new IllegalArgumentException("unknown metadata key " + key);
    }

    Map<String, String> settings() {
        return plan.settings;
    }
}
