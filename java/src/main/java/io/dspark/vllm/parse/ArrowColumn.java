package io.dspark.vllm.parse;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * One column of the core's result, read in place from the byte[] the JNI shim copies the result into (its
 * layout is declared in native/contract.py: {@link CoreContract}'s RESULT_* types and ARRAY_HEADER_* offsets).
 * Types as the core makes them: utf8, int64 (also timestamp[ms]), float64, bool, int8, and a list of one of them
 * ({@link #child}).
 */
public final class ArrowColumn {

    public final char type;
    public final int length;
    public final ArrowColumn child;
    private final int offset;
    private final byte[] bytes;
    private final ByteBuffer buffer;
    private final int validityAt; // -1: no nulls
    private final int offsetsAt; // utf8 and list: the int32 offsets
    private final int valuesAt; // the values; utf8: its data
    final int next; // where the next column starts

    private ArrowColumn(byte[] bytes, ByteBuffer buffer, int at) {
        this.bytes = bytes;
        this.buffer = buffer;
        type = (char) bytes[at + CoreContract.ARRAY_HEADER_TYPE_AT];
        length = Math.toIntExact(buffer.getLong(at + CoreContract.ARRAY_HEADER_LENGTH_AT));
        offset = Math.toIntExact(buffer.getLong(at + CoreContract.ARRAY_HEADER_OFFSET_AT));
        int end = offset + length;
        int validity = buffer.getInt(at + CoreContract.ARRAY_HEADER_VALIDITY_BYTES_AT);
        validityAt = validity == 0 ? -1 : at + CoreContract.ARRAY_HEADER_BYTES;
        int p = at + CoreContract.ARRAY_HEADER_BYTES + validity;
        switch (type) {
            case CoreContract.RESULT_UTF8:
                offsetsAt = p;
                p += 4 * (end + 1);
                long data = buffer.getLong(p);
                valuesAt = p + 8;
                next = Math.toIntExact(valuesAt + data);
                child = null;
                break;
            case CoreContract.RESULT_INT64:
            case CoreContract.RESULT_FLOAT64:
                offsetsAt = -1;
                valuesAt = p;
                next = p + 8 * end;
                child = null;
                break;
            case CoreContract.RESULT_BOOL:
                offsetsAt = -1;
                valuesAt = p;
                next = p + (end + 7) / 8;
                child = null;
                break;
            case CoreContract.RESULT_INT8:
                offsetsAt = -1;
                valuesAt = p;
                next = p + end;
                child = null;
                break;
            case CoreContract.RESULT_LIST:
                offsetsAt = p;
                valuesAt = -1;
                child = new ArrowColumn(bytes, buffer, p + 4 * (end + 1));
                next = child.next;
                break;
            default:
                throw new IllegalStateException("no Arrow type '" + type + "' in the native core's result");
        }
    }

    /**
     * The result's columns in its order, with their names ({@code bytes}: what the shim's columns() returned). A
     * name may repeat: a plan's column or property may be named like one the core adds ("verdict", "reason").
     */
    static java.util.List<java.util.Map.Entry<String, ArrowColumn>> ordered(byte[] bytes) {
        ByteBuffer buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        int n = buffer.getInt(0);
        java.util.List<java.util.Map.Entry<String, ArrowColumn>> columns = new java.util.ArrayList<>();
        int at = 4;
        for (int i = 0; i < n; i++) {
            int nameLength = buffer.getInt(at);
            String name = new String(bytes, at + 4, nameLength, StandardCharsets.UTF_8);
            ArrowColumn column = new ArrowColumn(bytes, buffer, at + 4 + nameLength);
            columns.add(java.util.Map.entry(name, column));
            at = column.next;
        }
        return columns;
    }

    /** The result's columns by name, in its order (the last of a repeated name). */
    static java.util.Map<String, ArrowColumn> all(byte[] bytes) {
        java.util.Map<String, ArrowColumn> columns = new java.util.LinkedHashMap<>();
        for (java.util.Map.Entry<String, ArrowColumn> e : ordered(bytes)) {
            columns.put(e.getKey(), e.getValue());
        }
        return columns;
    }

    public boolean isNull(int i) {
        int at = offset + i;
        return validityAt >= 0 && (bytes[validityAt + (at >>> 3)] & (1 << (at & 7))) == 0;
    }

    public long getLong(int i) {
        return buffer.getLong(valuesAt + 8 * (offset + i));
    }

    public double getDouble(int i) {
        return buffer.getDouble(valuesAt + 8 * (offset + i));
    }

    public boolean getBoolean(int i) {
        int at = offset + i;
        return (bytes[valuesAt + (at >>> 3)] & (1 << (at & 7))) != 0;
    }

    public byte getByte(int i) {
        return bytes[valuesAt + offset + i];
    }

    /** A list's value {@code i}: its elements are {@link #child}'s rows {@code start(i) .. end(i) - 1}. */
    public int start(int i) {
        return buffer.getInt(offsetsAt + 4 * (offset + i));
    }

    public int end(int i) {
        return buffer.getInt(offsetsAt + 4 * (offset + i + 1));
    }

    /** utf8: the bytes that hold value {@code i} at {@link #textAt(int)}, {@link #textLength(int)} of them. */
    public byte[] bytes() {
        return bytes;
    }

    public int textAt(int i) {
        return valuesAt + start(i);
    }

    public int textLength(int i) {
        return end(i) - start(i);
    }

    /** A utf8 value as a Java string (null when null). */
    public String getString(int i) {
        return isNull(i) ? null : new String(bytes, textAt(i), textLength(i), StandardCharsets.UTF_8);
    }
}
