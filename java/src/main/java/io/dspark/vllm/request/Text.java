package io.dspark.vllm.request;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Numbers and header values, written and read in one way for every error row. */
final class Text {
    private Text() {}

    private static final Pattern SPECIAL = Pattern.compile("[+-]?(?:inf|infinity|nan)", Pattern.CASE_INSENSITIVE);

    /** Python's {@code f"{x:g}"}: 6 significant digits, no trailing zeros, an exponent below 1e-4 or from 1e6. */
    static String g(double x) {
        if (Double.isNaN(x)) {
            return "nan";
        }
        if (Double.isInfinite(x)) {
            return x > 0 ? "inf" : "-inf";
        }
        if (x == 0.0) {
            return (1.0 / x < 0) ? "-0" : "0";
        }
        BigDecimal d = new BigDecimal(x).round(new MathContext(6, RoundingMode.HALF_EVEN));
        int exp = d.precision() - d.scale() - 1;
        if (exp >= -4 && exp < 6) {
            return plain(d);
        }
        String mantissa = plain(d.movePointLeft(exp));
        return mantissa + "e" + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }

    private static String plain(BigDecimal d) {
        String s = d.stripTrailingZeros().toPlainString();
        return s.equals("-0") ? "0" : s;
    }

    /** Python's {@code f"{x:.1f}"}. */
    /**
     * A duration in seconds as a person reads it: to the millisecond, no trailing zeros ("0.3", "0.001", "175"),
     * never "0" for a positive one.
     */
    static String seconds(double x) {
        if (!Double.isFinite(x)) {
            return g(x);
        }
        if (x > 0 && x < 0.001) {
            x = 0.001;
        }
        String s = new BigDecimal(x).setScale(3, RoundingMode.HALF_UP).stripTrailingZeros().toPlainString();
        return s.equals("-0") ? "0" : s;
    }

    static String oneDecimal(double x) {
        return new BigDecimal(x).setScale(1, RoundingMode.HALF_EVEN).toPlainString();
    }

    /** Python's {@code f"{n:,}"}. */
    static String thousands(long n) {
        return String.format(Locale.ROOT, "%,d", n);
    }

    /**
     * {@code text} as valid Unicode: each lone surrogate becomes the text of
     * its escape, as in {@code \\ud83d}; the rest, surrogate pairs too, is unchanged.
     */
    static String validText(String text) {
        StringBuilder out = null;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            boolean pair = Character.isHighSurrogate(c) && i + 1 < text.length()
                    && Character.isLowSurrogate(text.charAt(i + 1));
            if (pair) {
                if (out != null) {
                    out.append(c).append(text.charAt(i + 1));
                }
                i++;
            } else if (Character.isSurrogate(c)) {
                if (out == null) {
                    out = new StringBuilder(text.length() + 8).append(text, 0, i);
                }
                out.append(String.format(java.util.Locale.ROOT, "\\u%04x", (int) c));
            } else if (out != null) {
                out.append(c);
            }
        }
        return out == null ? text : out.toString();
    }

    /** Python's {@code float(value)} for the forms a header can hold; null when it is not a number. */
    static Double pyFloat(String value) {
        String v = value.strip();
        if (decimal(v)) {
            return Double.parseDouble(v.replace("_", "")); // (any number of digits: infinity or 0 past a double)
        }
        if (SPECIAL.matcher(v).matches()) {
            boolean negative = v.startsWith("-");
            String word = v.replaceFirst("^[+-]", "").toLowerCase(Locale.ROOT);
            if (word.equals("nan")) {
                return Double.NaN;
            }
            return negative ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
        }
        return null;
    }

    /**
     * Whether {@code v} is a decimal literal of Python's {@code float()}: {@code [+-] (digits [. [digits]] | .
     * digits) [(e|E) [+-] digits]}, digits being ASCII digits with single underscores between them. A scan, not a
     * regular expression: Java's repeats a group by recursion, and a header of thousands of digits overflowed
     * the stack.
     */
    private static boolean decimal(String v) {
        int i = 0;
        int n = v.length();
        if (i < n && (v.charAt(i) == '+' || v.charAt(i) == '-')) {
            i++;
        }
        int end = digits(v, i);
        boolean whole = end > i;
        i = end;
        if (i < n && v.charAt(i) == '.') {
            end = digits(v, i + 1);
            if (!whole && end == i + 1) {
                return false; // "." alone
            }
            i = end;
        } else if (!whole) {
            return false;
        }
        if (i < n && (v.charAt(i) == 'e' || v.charAt(i) == 'E')) {
            i++;
            if (i < n && (v.charAt(i) == '+' || v.charAt(i) == '-')) {
                i++;
            }
            end = digits(v, i);
            if (end == i) {
                return false;
            }
            i = end;
        }
        return i == n;
    }

    /** The end of the digits (with single underscores between them) from {@code from}; {@code from} if none. */
    private static int digits(String v, int from) {
        int i = from;
        int end = from;
        while (i < v.length()) {
            char c = v.charAt(i);
            if (c >= '0' && c <= '9') {
                end = ++i;
            } else if (c == '_' && end == i && i > from && i + 1 < v.length() && v.charAt(i + 1) >= '0'
                    && v.charAt(i + 1) <= '9') {
                i++;
            } else {
                break;
            }
        }
        return end;
    }

    /**
     * {@code Retry-After} in seconds: delta-seconds (a fraction is accepted) or an HTTP-date; null if invalid.
     */
    static Double parseRetryAfter(String value, long nowMillis) {
        if (value == null || value.isBlank()) {
            return null;
        }
        String v = value.strip();
        Double seconds = pyFloat(v);
        if (seconds == null) {
            Long when = httpDate(v);
            if (when == null) {
                return null;
            }
            seconds = (when - nowMillis) / 1000.0;
        }
        return seconds.isNaN() ? null : Math.max(0.0, seconds);
    }

    private static final Pattern RFC_850 = Pattern.compile(
            "[A-Za-z]+, (\\d{2})-([A-Za-z]{3})-(\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) GMT");
    private static final Pattern ASCTIME = Pattern.compile(
            "[A-Za-z]{3} ([A-Za-z]{3}) ( \\d|\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) (\\d{4})");
    private static final List<String> MONTHS =
            List.of("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec");

    /**
     * An HTTP-date (RFC 9110 5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms, which a recipient
     * must take too) in epoch milliseconds, or null. As Python's email.utils: the
     * day's name is not checked, and RFC 850's two-digit year is 1969 to 2068.
     */
    static Long httpDate(String v) {
        try {
            return ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant().toEpochMilli();
        } catch (DateTimeParseException e) {
            // the older forms below
        }
        Matcher m = RFC_850.matcher(v);
        int day;
        int month;
        int year;
        int[] time = new int[3];
        if (m.matches()) {
            day = Integer.parseInt(m.group(1));
            month = MONTHS.indexOf(m.group(2).toLowerCase(Locale.ROOT)) + 1;
            int yy = Integer.parseInt(m.group(3));
            year = yy > 68 ? 1900 + yy : 2000 + yy;
            for (int k = 0; k < 3; k++) {
                time[k] = Integer.parseInt(m.group(4 + k));
            }
        } else if ((m = ASCTIME.matcher(v)).matches()) {
            month = MONTHS.indexOf(m.group(1).toLowerCase(Locale.ROOT)) + 1;
            day = Integer.parseInt(m.group(2).strip());
            for (int k = 0; k < 3; k++) {
                time[k] = Integer.parseInt(m.group(3 + k));
            }
            year = Integer.parseInt(m.group(6));
        } else {
            return null;
        }
        try {
            return java.time.LocalDateTime.of(year, month, day, time[0], time[1], time[2])
                    .toInstant(java.time.ZoneOffset.UTC).toEpochMilli();
        } catch (java.time.DateTimeException e) { // month 0 (no such name), 31 February, 25 o'clock
            return null;
        }
    }

    /** The first {@code n} code points of {@code s} (Python's {@code s[:n]}). */
    static String codePoints(String s, int n) {
        if (s.codePointCount(0, s.length()) <= n) {
            return s;
        }
        return s.substring(0, s.offsetByCodePoints(0, n));
    }

    /** Python's {@code data[:n].decode("utf-8", "replace")}. */
    static String utf8Head(byte[] data, int n) {
        return new String(data, 0, Math.min(n, data.length), StandardCharsets.UTF_8);
    }

    /** The index of the first lone surrogate in {@code s}, or -1. */
    static int loneSurrogate(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                    i++;
                } else {
                    return i;
                }
            } else if (Character.isLowSurrogate(c)) {
                return i;
            }
        }
        return -1;
    }
}
