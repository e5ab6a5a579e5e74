package io.dspark.vllm.engine;

import io.dspark.vllm.parse.ArrowColumn;
import io.dspark.vllm.plan.Plan;

import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.table.data.writer.BinaryRowWriter;
import org.apache.flink.table.data.writer.BinaryWriter;
import org.apache.flink.table.runtime.typeutils.InternalSerializers;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.RowType;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * How the parse step in the JVM ({@link ParseOperator}) assembles each row it emits from what it has for a
 * body: the native core's columns, the step's own values ({@code contract.PARSE_INTERNAL}: line, error, error
 * field, backend) and the columns of its input row (the request's, the file's), or of an input row alone (the
 * Python parse step's flat row; the request's or the file's where no parse step runs): {@link #declared}, the
 * table's row as the query reads it, from the plan's {@code from} layouts, each cast as Flink's CAST where the
 * declared type is another ({@link Casts}), so no SQL runs after the parse step (no conversion between tables and
 * streams, no Calc, no copy of a wide intermediate row). The table, the format and the model all make their rows
 * so.
 */
public final class RowShape implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String CREATED = "created";
    private static final StringData CPU = BinaryStringData.fromBytes("cpu".getBytes(StandardCharsets.UTF_8));

    /** What the step has for one body, for the fields to read. */
    static final class Body {
        ArrowColumn[] columns; // the core's, by the shape's core slots; null when the core gave nothing
        int i; // the body's row in them
        RowData in;
        long line;
        StringData reason;
        StringData field;
        boolean hasCreated; // the row's `created`, as the step settled it (the body's, or filled in)
        long created;
        Object[] answer; // the answer fields' values, as checked (check); null for an error row
    }

    /** One value of the emitted row. */
    private interface Field extends Serializable {
        /** As a RowData field (a nested ROW's). */
        Object value(Body b);

        /** Into the emitted binary row, at {@code pos} ({@code type}: the field's; {@code serializer}: for ROW and ARRAY). */
        default void write(BinaryRowWriter w, int pos, Body b, LogicalType type, TypeSerializer<?> serializer) {
            Object v = value(b);
            if (v == null) {
                w.setNullAt(pos);
            } else {
                BinaryWriter.write(w, pos, v, type, serializer);
            }
        }
    }

    private final Field[] fields;
    private final RowType type; // the emitted row's
    private final List<String> core; // the core columns the fields read, by slot
    private final boolean needsLine;
    private final Answers answers; // the answer fields' check, or null
    private final Field[] answerInputs; // per answer field, its flat value; then finish_reason, refusal,
                                        // completion_tokens, content_error
    private final int inputError; // the input row's '_error' (the Python parse step's flat row), or -1
    private transient TypeSerializer<?>[] serializers;
    private transient BinaryRowData out;
    private transient BinaryRowWriter writer;

    private RowShape(Field[] fields, RowType type, List<String> core, boolean needsLine, Answers answers,
            Field[] answerInputs, int inputError) {
        this.fields = fields;
        this.type = type;
        this.core = core;
        this.needsLine = needsLine;
        this.answers = answers;
        this.answerInputs = answerInputs;
        this.inputError = inputError;
    }

    /**
     * Holds the body's answer to its schema ({@link Answers}) where the shape has answer fields and the body is no
     * error row yet: fills {@code b.answer}, or makes the row an error row ({@code b.reason}, {@code b.field}).
     * Returns whether the row is an error row.
     */
    boolean check(Body b) {
        b.answer = null;
        if (answers == null || b.reason != null) {
            return b.reason != null;
        }
        if (inputError >= 0 && !b.in.isNullAt(inputError)) {
            return true; // the Python parse step's error row
        }
        int n = answers.size();
        Object[] flat = new Object[n];
        for (int k = 0; k < n; k++) {
            flat[k] = answerInputs[k].value(b);
        }
        Object[] out = new Object[n];
        String[] bad = answers.check(flat, answerInputs[n].value(b), answerInputs[n + 1].value(b),
                answerInputs[n + 2].value(b), answerInputs[n + 3].value(b), out);
        if (bad != null) {
            b.reason = StringData.fromString(bad[0]);
            b.field = bad[1] == null ? null : StringData.fromString(bad[1]);
            return true;
        }
        b.answer = out;
        return false;
    }

    /** The emitted rows' type. */
    RowType type() {
        return type;
    }

    /** The core columns this shape reads (so only they are parsed). */
    List<String> coreColumns() {
        return core;
    }

    boolean needsLine() {
        return needsLine;
    }

    /** The core's columns of one result part, by this shape's slots. */
    ArrowColumn[] bind(Map<String, ArrowColumn> part) {
        ArrowColumn[] columns = new ArrowColumn[core.size()];
        for (int k = 0; k < columns.length; k++) {
            columns[k] = part.get(core.get(k));
        }
        return columns;
    }

    /**
     * The emitted row of one body, written straight into a binary row (no object per field). The same row
     * object every time: what the operator emits is copied by the chained operator after it (or serialized)
     * before the next one is written, and with object reuse no operator keeps a row it was given.
     */
    BinaryRowData row(Body b) {
        if (writer == null) {
            serializers = new TypeSerializer<?>[fields.length];
            for (int k = 0; k < fields.length; k++) {
                serializers[k] = InternalSerializers.create(type.getTypeAt(k));
            }
            out = new BinaryRowData(fields.length);
            writer = new BinaryRowWriter(out, 1024);
        }
        writer.reset();
        for (int k = 0; k < fields.length; k++) {
            fields[k].write(writer, k, b, type.getTypeAt(k), serializers[k]);
        }
        writer.complete();
        return out;
    }

    /**
     * The emitted row of one body as a new GenericRowData: a format's rows (connectors such as Kafka's take a
     * format's rows as GenericRowData).
     */
    GenericRowData generic(Body b) {
        GenericRowData row = new GenericRowData(fields.length);
        for (int k = 0; k < fields.length; k++) {
            row.setField(k, fields[k].value(b));
        }
        return row;
    }

    // --- the shape -----------------------------------------------------------------------

    /**
     * The declared row ({@code produced}: the physical columns, then the metadata's), each field from its
     * layout ({@code layouts}, in the same order; see the planner's docstring), cast as Flink's CAST does where
     * the declared type is another ({@link Casts}); null when one has none. {@code made}: the columns the core
     * makes, and their types.
     */
    static RowShape declared(
            RowType produced, List<Plan.Layout> layouts, RowType input, Map<String, LogicalType> made) {
        return declared(produced, layouts, input, made, null);
    }

    /**
     * The declared row, with answer fields where {@code answer} (the plan's "answer": its fields and their schemas)
     * is not null: a layout of {@code answer} NAME is the checked value of that field.
     */
    static RowShape declared(
            RowType produced, List<Plan.Layout> layouts, RowType input, Map<String, LogicalType> made,
            Plan.Answer answer) {
        Builder b = new Builder(input, made);
        Answers answers = null;
        Field[] answerInputs = null;
        if (answer != null) {
            answers = new Answers(answer);
            answerInputs = new Field[answers.size() + 4];
            for (int k = 0; k < answers.size(); k++) {
                answerInputs[k] = b.flat(answers.name(k));
                b.answers.add(answers.name(k));
            }
            List<String> facts = answer.facts; // finish_reason, refusal, completion_tokens, content_error
            if (facts.size() != 4) {
                throw new IllegalArgumentException("dspark-vllm: the plan's answer facts " + facts + " are not this "
                        + "jar's four: install the same dspark-vllm on the client and the TaskManagers");
            }
            for (int k = 0; k < facts.size(); k++) {
                answerInputs[answers.size() + k] = b.flat(facts.get(k));
            }
            for (Field f : answerInputs) {
                if (f == null) {
                    return null;
                }
            }
        }
        Field[] fields = new Field[produced.getFieldCount()];
        for (int k = 0; k < fields.length; k++) {
            Plan.Layout layout = layouts.get(k);
            fields[k] = layout == null ? null : b.field(layout, produced.getTypeAt(k));
            if (fields[k] == null) {
                return null;
            }
        }
        return new RowShape(fields, produced, b.core, b.line, answers, answerInputs,
                input.getFieldNames().indexOf("_error"));
    }

    /** Resolves layouts into fields, collecting the core columns they read. */
    private static final class Builder {
        final RowType input;
        final Map<String, LogicalType> made; // what the core makes, as which type
        final List<String> core = new ArrayList<>();
        final List<String> answers = new ArrayList<>(); // the answer fields, by index
        boolean line;

        Builder(RowType input, Map<String, LogicalType> made) {
            this.input = input;
            this.made = made;
        }

        /** A flat column as it is made (the core's, or the input row's), for the answer check; null if none. */
        Field flat(String name) {
            int index = input.getFieldNames().indexOf(name);
            if (index >= 0) {
                return new Input(index, input.getTypeAt(index));
            }
            return made.containsKey(name) ? core(name, made.get(name), made.get(name)) : null;
        }

        Field field(Plan.Layout layout, LogicalType type) {
            if (layout.answer != null) {
                int k = answers.indexOf(layout.answer);
                return k < 0 ? null : new AnswerValue(k);
            }
            if (layout.row != null) {
                if (!(type instanceof RowType) || layout.row.size() != ((RowType) type).getFieldCount()) {
                    return null;
                }
                RowType row = (RowType) type;
                Field[] parts = new Field[row.getFieldCount()];
                for (int k = 0; k < parts.length; k++) {
                    parts[k] = field(layout.row.get(k).from, row.getTypeAt(k));
                    if (parts[k] == null) {
                        return null;
                    }
                }
                return new Nested(parts);
            }
            String name = layout.column;
            if (name == null) {
                return null;
            }
            Field f;
            int index = input.getFieldNames().indexOf(name);
            // The parse step's own columns ('_line', '_error', ...): the ParseOperator's, unless the input row has
            // them (the flat row of the Python parse step, PythonParseStep).
            Internal internal = index >= 0 ? null : Internal.of(name);
            if (internal != null) {
                line |= internal == Internal.LINE;
                f = internal;
            } else if (index >= 0 && (name.equals(Internal.ERROR.column) || name.equals(Internal.ERROR_FIELD.column))) {
                // the Python parse step's error columns, unless the answer check made the row an error row
                f = new Checked(Internal.of(name), input(index, type));
            } else if (made.containsKey(name)) {
                f = core(name, made.get(name), type);
                if (f == null) {
                    return null;
                }
            } else if (index >= 0) {
                f = input(index, type);
                if (f == null) {
                    return null;
                }
            } else {
                return null;
            }
            if (layout.defaultValue != null) {
                f = new Default(f, layout.defaultValue);
            }
            return f;
        }

        /**
         * A core column the core makes as {@code made}, written as {@code type}: read as it is where that is the
         * same (or INT from BIGINT, FLOAT from DOUBLE: Java's narrowing, as Flink's CAST), else cast.
         */
        Field core(String name, LogicalType made, LogicalType type) {
            int slot = core.indexOf(name);
            if (slot < 0) {
                slot = core.size();
                core.add(name);
            }
            boolean direct = made.copy(true).equals(type.copy(true))
                    || (made.is(LogicalTypeRoot.BIGINT) && type.is(LogicalTypeRoot.INTEGER))
                    || (made.is(LogicalTypeRoot.DOUBLE) && type.is(LogicalTypeRoot.FLOAT));
            LogicalType read = direct ? type : made;
            Field f = name.equals(CREATED) ? new Created(slot, read) : new Core(slot, read);
            if (direct) {
                return f;
            }
            Casts.Cast cast = Casts.of(made, type);
            return cast == null ? null : new Converted(f, cast);
        }

        /** An input column as {@code type}: the same, TIMESTAMP_LTZ from BIGINT epoch milliseconds, or cast. */
        Field input(int index, LogicalType type) {
            LogicalType from = input.getTypeAt(index);
            if (from.getTypeRoot() == LogicalTypeRoot.BIGINT
                    && type.getTypeRoot() == LogicalTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE) {
                return new Millis(index);
            }
            Field f = new Input(index, from);
            if (from.copy(true).equals(type.copy(true))) {
                return f;
            }
            // another type: Flink's CAST (the Python parse step's flat columns as declared)
            Casts.Cast cast = Casts.of(from, type);
            return cast == null ? null : new Converted(f, cast);
        }
    }

    // --- the fields -----------------------------------------------------------------------

    /** A core column as {@code type} ({@link NativeRows#value}); NULL for an error row. */
    private static final class Core implements Field {
        private static final long serialVersionUID = 1L;
        final int slot;
        final LogicalType type;

        Core(int slot, LogicalType type) {
            this.slot = slot;
            this.type = type;
        }

        @Override
        public Object value(Body b) {
            ArrowColumn column = b.columns == null ? null : b.columns[slot];
            return column == null || column.isNull(b.i) ? null : NativeRows.value(column, b.i, type);
        }

        @Override
        public void write(BinaryRowWriter w, int pos, Body b, LogicalType t, TypeSerializer<?> serializer) {
            ArrowColumn column = b.columns == null ? null : b.columns[slot];
            int i = b.i;
            if (column == null || column.isNull(i)) {
                w.setNullAt(pos);
                return;
            }
            switch (type.getTypeRoot()) {
                case CHAR:
                case VARCHAR:
                    w.writeString(pos, BinaryStringData.fromBytes(column.bytes(), column.textAt(i), column.textLength(i)));
                    return;
                case BIGINT:
                    w.writeLong(pos, column.getLong(i));
                    return;
                case INTEGER:
                    w.writeInt(pos, (int) column.getLong(i));
                    return;
                case DOUBLE:
                    w.writeDouble(pos, column.getDouble(i));
                    return;
                case FLOAT:
                    w.writeFloat(pos, (float) column.getDouble(i));
                    return;
                case BOOLEAN:
                    w.writeBoolean(pos, column.getBoolean(i));
                    return;
                default:
                    BinaryWriter.write(w, pos, NativeRows.value(column, i, type), type, serializer);
            }
        }
    }

    /** `created`: the body's, or the time the step filled in for a row without one. */
    private static final class Created implements Field {
        private static final long serialVersionUID = 1L;
        final Core core;

        Created(int slot, LogicalType type) {
            this.core = new Core(slot, type);
        }

        @Override
        public Object value(Body b) {
            return b.hasCreated ? TimestampData.fromEpochMillis(b.created) : core.value(b);
        }
    }

    private static final class Input implements Field {
        private static final long serialVersionUID = 1L;
        final RowData.FieldGetter getter;

        Input(int index, LogicalType type) {
            this.getter = RowData.createFieldGetter(type, index);
        }

        @Override
        public Object value(Body b) {
            return getter.getFieldOrNull(b.in);
        }
    }

    /** TIMESTAMP_LTZ(3) from an input column of epoch milliseconds (SQL's TO_TIMESTAMP_LTZ(x, 3)). */
    private static final class Millis implements Field {
        private static final long serialVersionUID = 1L;
        final int index;

        Millis(int index) {
            this.index = index;
        }

        @Override
        public Object value(Body b) {
            return b.in.isNullAt(index) ? null : TimestampData.fromEpochMillis(b.in.getLong(index));
        }
    }

    /** A value cast to the declared type ({@link Casts}); NULL stays NULL. */
    private static final class Converted implements Field {
        private static final long serialVersionUID = 1L;
        final Field value;
        final Casts.Cast cast;

        Converted(Field value, Casts.Cast cast) {
            this.value = value;
            this.cast = cast;
        }

        @Override
        public Object value(Body b) {
            Object v = value.value(b);
            return v == null ? null : cast.apply(v);
        }
    }

    /** An answer field's value, as the answer check made it ({@link #check}); NULL for an error row. */
    private static final class AnswerValue implements Field {
        private static final long serialVersionUID = 1L;
        final int k;

        AnswerValue(int k) {
            this.k = k;
        }

        @Override
        public Object value(Body b) {
            return b.answer == null ? null : b.answer[k];
        }
    }

    /** An error column of the input row, or the answer check's reason where it made the row an error row. */
    private static final class Checked implements Field {
        private static final long serialVersionUID = 1L;
        final Internal own;
        final Field input;

        Checked(Internal own, Field input) {
            this.own = own;
            this.input = input;
        }

        @Override
        public Object value(Body b) {
            return b.reason != null ? own.value(b) : input.value(b);
        }
    }

    /** SQL's COALESCE(value, default). */
    private static final class Default implements Field {
        private static final long serialVersionUID = 1L;
        final Field value;
        final String fallback;

        Default(Field value, String fallback) {
            this.value = value;
            this.fallback = fallback;
        }

        @Override
        public Object value(Body b) {
            Object v = value.value(b);
            return v != null ? v : BinaryStringData.fromString(fallback);
        }
    }

    private static final class Nested implements Field {
        private static final long serialVersionUID = 1L;
        final Field[] fields;

        Nested(Field[] fields) {
            this.fields = fields;
        }

        @Override
        public Object value(Body b) {
            GenericRowData row = new GenericRowData(fields.length);
            for (int k = 0; k < fields.length; k++) {
                row.setField(k, fields[k].value(b));
            }
            return row;
        }
    }

    /** The step's own columns, in {@code contract.PARSE_INTERNAL}'s order. */
    private enum Internal implements Field {
        LINE("_line"),
        ERROR("_error"),
        ERROR_FIELD("_error_field"),
        BACKEND("_backend");

        final String column;

        Internal(String column) {
            this.column = column;
        }

        static Internal of(String name) {
            for (Internal i : values()) {
                if (i.column.equals(name)) {
                    return i;
                }
            }
            return null;
        }

        @Override
        public Object value(Body b) {
            switch (this) {
                case LINE:
                    return b.line;
                case ERROR:
                    return b.reason;
                case ERROR_FIELD:
                    return b.field;
                default:
                    return CPU;
            }
        }
    }
}
