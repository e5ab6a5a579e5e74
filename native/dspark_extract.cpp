// connector/decode/extract.py for one text (see dspark_extract.h). Each piece follows the code the reference
// runs: pyarrow's kernels (extract_regex, match_substring_regex, count_substring_regex) for the first match,
// its presence and the count; google-re2's finditer for all and last matches; extract.py's text_scalar for
// the conversions; strict.py's loads (CPython's json scanner with the project's rules) for `json` values.
#include "dspark_extract.h"

#include <locale.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <utility>

#include "dspark_unprintable.h"
#include "re2/re2.h"

namespace dspark {
namespace {

using re2::RE2;
using re2::StringPiece;

const char* kind_name(ContentKind kind) {
  switch (kind) {
    case ContentKind::STRING: return "string";
    case ContentKind::INTEGER: return "integer";
    case ContentKind::NUMBER: return "number";
    case ContentKind::BOOLEAN: return "boolean";
    case ContentKind::ARRAY: return "array";
    case ContentKind::JSON: return "json";
  }
  return "?";
}

std::string_view view(const StringPiece& p) { return p.data() ? std::string_view(p.data(), p.size()) : ""; }

// google-re2's OneCharLen: the length of the UTF-8 sequence a lead byte starts.
size_t one_char_len(unsigned char lead) { return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[lead >> 4]; }

// -- matching -----------------------------------------------------------------------------------------------

// The value's group: 1, or the whole match when the pattern has none.
int value_group(const RE2& re) { return re.NumberOfCapturingGroups() > 0 ? 1 : 0; }

// pyarrow's extract_regex (RE2::PartialMatchN) and google-re2's search: the leftmost match. A group that took
// no part gives "" (pyarrow appends its empty piece; extract.py maps None to "").
bool first_match(const RE2& re, std::string_view text, std::string_view& out) {
  int group = value_group(re);
  StringPiece pieces[2];
  if (!re.Match(StringPiece(text.data(), text.size()), 0, text.size(), RE2::UNANCHORED, pieces, group + 1))
    return false;
  out = view(pieces[group]);
  return true;
}

// google-re2's finditer over a str: each search starts where the last match ended, over the whole text (so
// `^` and `\b` see what is before); after an empty match at the start position it moves on by a character.
template <typename Visit>
void each_match(const RE2& re, std::string_view text, Visit visit) {
  int group = value_group(re);
  StringPiece pieces[2];
  StringPiece whole(text.data(), text.size());
  size_t pos = 0, end = text.size();
  while (re.Match(whole, pos, end, RE2::UNANCHORED, pieces, group + 1)) {
    visit(view(pieces[group]));
    size_t match_end = static_cast<size_t>(pieces[0].data() - text.data()) + pieces[0].size();
    if (pos == end) break;
    if (pos == match_end) {
      pos += one_char_len(static_cast<unsigned char>(text[pos]));
      if (pos > end) pos = end;  // only for text that is not UTF-8
    } else {
      pos = match_end;
    }
  }
}

// pyarrow's count_substring_regex, step for step: FindAndConsume on the rest of the text (which is then the
// whole text to RE2: `^` matches where the rest starts), and past an empty match one byte on.
int64_t count_matches(const RE2& re, std::string_view text) {
  StringPiece input(text.data(), text.size());
  int64_t count = 0;
  size_t last_size = input.size();
  while (RE2::FindAndConsume(&input, re)) {
    ++count;
    if (last_size == input.size()) {
      if (input.size() > 0)
        input.remove_prefix(1);
      else
        break;
    }
    last_size = input.size();
  }
  return count;
}

// -- Python's repr of a str ------------------------------------------------------------------------------------

bool printable(uint32_t c) {  // str.isprintable() for one code point from U+0080 up
  size_t lo = 0, hi = sizeof kUnprintable / sizeof kUnprintable[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < kUnprintable[mid][0])
      hi = mid;
    else if (c > kUnprintable[mid][1])
      lo = mid + 1;
    else
      return false;
  }
  return true;
}

// -- text_scalar -------------------------------------------------------------------------------------------------

bool digit(char c) { return c >= '0' && c <= '9'; }

std::string_view strip(std::string_view s) {  // str.strip(" \t\n\r")
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool is_integer(std::string_view s) {  // _INTEGER.fullmatch: [-+]?[0-9]+
  size_t i = !s.empty() && (s[0] == '-' || s[0] == '+');
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!digit(s[i])) return false;
  return true;
}

bool is_number(std::string_view s) {  // _NUMBER.fullmatch: [-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?
  size_t i = 0, n = s.size();
  if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
  if (i < n && digit(s[i])) {
    while (i < n && digit(s[i])) ++i;
    if (i < n && s[i] == '.') ++i;
    while (i < n && digit(s[i])) ++i;
  } else if (i < n && s[i] == '.') {
    ++i;
    if (i == n || !digit(s[i])) return false;
    while (i < n && digit(s[i])) ++i;
  } else {
    return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
    if (i == n || !digit(s[i])) return false;
    while (i < n && digit(s[i])) ++i;
  }
  return i == n;
}

// float() of a decimal text: correctly rounded, whatever the locale; overflow gives an infinity.
double c_strtod(std::string_view s) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  std::string text(s);
  return strtod_l(text.c_str(), nullptr, c_locale);
}

bool ascii_iequals(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;  // no character outside ASCII lowercases into "true" or "false"
}

std::string wrong_type(ContentKind kind, std::string_view text) {
  return std::string("wrong type: expected ") + kind_name(kind) + ", got " + py_str_repr(first_code_points(text, 40));
}

bool text_scalar(std::string_view text, ContentKind kind, ExtractedValue& out, std::string& reason) {
  if (kind == ContentKind::STRING) {
    out.tag = ExtractedValue::STR;
    out.s.assign(text);
    return true;
  }
  std::string_view stripped = strip(text);
  if (kind == ContentKind::INTEGER && is_integer(stripped)) {
    // len(stripped) <= 20 and within int64: 20 characters are at most 20 digits, below 2^67.
    if (stripped.size() <= 20) {
      bool negative = stripped[0] == '-';
      size_t i = stripped[0] == '-' || stripped[0] == '+';
      unsigned __int128 magnitude = 0;
      for (; i < stripped.size(); ++i) magnitude = magnitude * 10 + static_cast<unsigned>(stripped[i] - '0');
      unsigned __int128 limit = static_cast<unsigned __int128>(INT64_MAX) + (negative ? 1 : 0);
      if (magnitude <= limit) {
        out.tag = ExtractedValue::INT;
        out.i = negative ? static_cast<int64_t>(0 - static_cast<uint64_t>(magnitude)) : static_cast<int64_t>(magnitude);
        return true;
      }
    }
    reason = "out of range for a 64-bit integer";
    return false;
  }
  if (kind == ContentKind::NUMBER && is_number(stripped)) {
    double d = c_strtod(stripped);
    if (!std::isinf(d)) {
      out.tag = ExtractedValue::DBL;
      out.d = d;
      return true;
    }
  }
  if (kind == ContentKind::BOOLEAN && (ascii_iequals(stripped, "true") || ascii_iequals(stripped, "false"))) {
    out.tag = ExtractedValue::BOOL;
    out.b = ascii_iequals(stripped, "true");
    return true;
  }
  reason = wrong_type(kind, text);
  return false;
}

// -- strict.py's loads and exact.py's json_text ------------------------------------------------------------------
//
// CPython's json scanner with loads's rules: JSON whitespace only, no NaN or Infinity, every number within a
// double (integers of any length up to that, kept as their digits), at most 64 levels deep, and no unpaired
// surrogate escape left in the value (checked on the value, as strict.py does: a duplicate name's earlier
// value is gone). Names repeat as a dict does: the last value, at the first name's place. Strings hold their
// UTF-8, an unpaired surrogate as its three-byte form (0xED 0xA0-0xBF ..), which no valid text contains.

constexpr int kDepthLimit = 64;

struct JValue {
  enum Type : uint8_t { NUL, FALSE_, TRUE_, INT, FLOAT, STR, ARR, OBJ } type = NUL;
  double d = 0;
  std::string s;  // STR: the string; INT: its digits as the text has them
  std::vector<JValue> items;
  std::vector<std::string> keys;  // OBJ: one per item
};

void put_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

struct Parser {
  std::string_view t;

  size_t skip(size_t i) const {
    while (i < t.size() && json_ws(t[i])) ++i;
    return i;
  }

  bool hex4(size_t i, uint32_t& c) const {
    if (i + 4 > t.size()) return false;
    c = 0;
    for (size_t k = i; k < i + 4; ++k) {
      char h = t[k];
      c <<= 4;
      if (h >= '0' && h <= '9')
        c |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        c |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        c |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  // scanstring: i is just past the opening quote.
  bool string(size_t i, size_t& end, std::string& out) const {
    out.clear();
    while (true) {
      size_t run = i;
      while (i < t.size() && t[i] != '"' && t[i] != '\\' && static_cast<unsigned char>(t[i]) >= 0x20) ++i;
      out.append(t.substr(run, i - run));
      if (i >= t.size() || static_cast<unsigned char>(t[i]) < 0x20) return false;  // unterminated, control
      if (t[i] == '"') {
        end = i + 1;
        return true;
      }
      if (++i >= t.size()) return false;
      char e = t[i];
      if (e != 'u') {
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          default: return false;
        }
        ++i;
        continue;
      }
      uint32_t c;
      if (!hex4(i + 1, c)) return false;
      i += 5;
      uint32_t low;
      if (c >= 0xD800 && c <= 0xDBFF && i + 1 < t.size() && t[i] == '\\' && t[i + 1] == 'u' && hex4(i + 2, low) &&
          low >= 0xDC00 && low <= 0xDFFF) {
        c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
        i += 6;
      }
      put_utf8(out, c);
    }
  }

  bool number(size_t i, size_t& end, JValue& out) const {
    size_t start = i;
    if (t[i] == '-') ++i;
    if (i >= t.size()) return false;
    if (t[i] >= '1' && t[i] <= '9') {
      while (i < t.size() && digit(t[i])) ++i;
    } else if (t[i] == '0') {
      ++i;
    } else {
      return false;
    }
    bool is_float = false;
    if (i + 1 < t.size() && t[i] == '.' && digit(t[i + 1])) {
      is_float = true;
      i += 2;
      while (i < t.size() && digit(t[i])) ++i;
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      size_t e = i++;
      if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
      size_t digits = i;
      while (i < t.size() && digit(t[i])) ++i;
      if (i > digits)
        is_float = true;
      else
        i = e;
    }
    std::string_view text = t.substr(start, i - start);
    end = i;
    if (is_float) {  // _float
      out.type = JValue::FLOAT;
      out.d = c_strtod(text);
      return !std::isinf(out.d);
    }
    // _int: more than 309 digits, or beyond a double once rounded (only 309 digits can be), is out of range.
    size_t digits = text.size() - (text[0] == '-');
    if (digits > 309 || (digits == 309 && std::isinf(c_strtod(text)))) return false;
    out.type = JValue::INT;
    out.s.assign(text == "-0" ? std::string_view("0") : text);
    return true;
  }

  bool literal(size_t i, std::string_view word) const { return t.substr(i, word.size()) == word; }

  // scan_once: a value at i (no whitespace skipped).
  bool value(size_t i, size_t& end, JValue& out, int depth) const {
    if (i >= t.size()) return false;
    char c = t[i];
    if (c == '"') {
      out.type = JValue::STR;
      return string(i + 1, end, out.s);
    }
    if (c == '{' || c == '[') {
      if (depth >= kDepthLimit) return false;
      return c == '{' ? object(i + 1, end, out, depth + 1) : array(i + 1, end, out, depth + 1);
    }
    if (c == 'n' && literal(i, "null")) {
      out.type = JValue::NUL;
      end = i + 4;
      return true;
    }
    if (c == 't' && literal(i, "true")) {
      out.type = JValue::TRUE_;
      end = i + 4;
      return true;
    }
    if (c == 'f' && literal(i, "false")) {
      out.type = JValue::FALSE_;
      end = i + 5;
      return true;
    }
    if (c == '-' || digit(c)) return number(i, end, out);
    return false;  // NaN, Infinity and -Infinity are refused too (strict.py's parse_constant)
  }

  bool object(size_t i, size_t& end, JValue& out, int depth) const {
    out.type = JValue::OBJ;
    std::unordered_map<std::string, size_t> index;  // past a few names: where each name is
    i = skip(i);
    if (i < t.size() && t[i] == '}') {
      end = i + 1;
      return true;
    }
    std::string key;
    while (true) {
      if (i >= t.size() || t[i] != '"') return false;
      if (!string(i + 1, i, key)) return false;
      i = skip(i);
      if (i >= t.size() || t[i] != ':') return false;
      i = skip(i + 1);
      JValue item;
      if (!value(i, i, item, depth)) return false;
      size_t at = out.keys.size();
      if (out.keys.size() < 8) {
        for (size_t k = 0; k < out.keys.size(); ++k)
          if (out.keys[k] == key) at = k;
      } else {
        if (index.empty())
          for (size_t k = 0; k < out.keys.size(); ++k) index.emplace(out.keys[k], k);
        auto found = index.emplace(key, out.keys.size());
        at = found.first->second;
      }
      if (at == out.keys.size()) {
        out.keys.push_back(key);
        out.items.push_back(std::move(item));
      } else {
        out.items[at] = std::move(item);
      }
      i = skip(i);
      if (i < t.size() && t[i] == '}') {
        end = i + 1;
        return true;
      }
      if (i >= t.size() || t[i] != ',') return false;
      i = skip(i + 1);
    }
  }

  bool array(size_t i, size_t& end, JValue& out, int depth) const {
    out.type = JValue::ARR;
    i = skip(i);
    if (i < t.size() && t[i] == ']') {
      end = i + 1;
      return true;
    }
    while (true) {
      out.items.emplace_back();
      if (!value(i, i, out.items.back(), depth)) return false;
      i = skip(i);
      if (i < t.size() && t[i] == ']') {
        end = i + 1;
        return true;
      }
      if (i >= t.size() || t[i] != ',') return false;
      i = skip(i + 1);
    }
  }
};

bool has_unpaired_surrogate(const std::string& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0) return true;
  return false;
}

bool surrogate_free(const JValue& v) {
  if (v.type == JValue::STR) return !has_unpaired_surrogate(v.s);
  for (const std::string& key : v.keys)
    if (has_unpaired_surrogate(key)) return false;
  for (const JValue& item : v.items)
    if (!surrogate_free(item)) return false;
  return true;
}

bool loads(std::string_view text, JValue& out) {
  Parser parser{text};
  size_t first = parser.skip(0), end;
  if (first == text.size()) return false;  // "empty"
  if (!parser.value(first, end, out, 0) || parser.skip(end) != text.size()) return false;
  return surrogate_free(out);  // a byte order mark is no JSON value: refused above
}

// json.dumps(s, ensure_ascii=False) of a string.
void write_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (u < 0x20) {
          out.append("\\u00");
          out.push_back(hex[u >> 4]);
          out.push_back(hex[u & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// float.__repr__: the shortest digits that read back as the same double, in fixed notation when the decimal
// point falls within -4 < decpt <= 16 (with ".0" when integral), else d.ddde+XX.
void write_double(std::string& out, double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view t(buf, static_cast<size_t>(r.ptr - buf));
  if (!t.empty() && t[0] == '-') {
    out.push_back('-');
    t.remove_prefix(1);
  }
  size_t e = t.find('e');
  std::string digits(1, t[0]);
  if (e > 1) digits.append(t.substr(2, e - 2));
  int exponent = std::atoi(std::string(t.substr(e + 1)).c_str());
  int decpt = exponent + 1;
  int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out.push_back('e');
    out.push_back(exponent < 0 ? '-' : '+');
    int a = exponent < 0 ? -exponent : exponent;
    if (a < 10) out.push_back('0');
    out.append(std::to_string(a));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt < n) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  } else {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  }
}

void json_text(std::string& out, const JValue& v) {
  switch (v.type) {
    case JValue::NUL: out.append("null"); return;
    case JValue::FALSE_: out.append("false"); return;
    case JValue::TRUE_: out.append("true"); return;
    case JValue::INT: out.append(v.s); return;
    case JValue::FLOAT: write_double(out, v.d); return;
    case JValue::STR: write_string(out, v.s); return;
    case JValue::ARR:
    case JValue::OBJ:
      out.push_back(v.type == JValue::ARR ? '[' : '{');
      for (size_t k = 0; k < v.items.size(); ++k) {
        if (k) out.push_back(',');
        if (v.type == JValue::OBJ) {
          write_string(out, v.keys[k]);
          out.push_back(':');
        }
        json_text(out, v.items[k]);
      }
      out.push_back(v.type == JValue::ARR ? ']' : '}');
      return;
  }
}

// extract.py's _embedded: a match's JSON value, appended as json_text writes it.
bool embedded(std::string_view match, std::string& out, std::string& reason) {
  JValue value;
  if (!loads(match, value)) {
    reason = "not JSON: " + py_str_repr(first_code_points(match, 40));
    return false;
  }
  json_text(out, value);
  return true;
}

// extract.py's _converter applied to what the pattern took: one match, or (`all`) every match.
bool convert(const ContentPropertySpec& p, const std::vector<std::string_view>& matches, ExtractedValue& out,
             std::string& reason) {
  if (p.kind == ContentKind::JSON) {
    out.tag = ExtractedValue::STR;
    out.s.clear();
    if (p.mode != ExtractMode::ALL) return embedded(matches[0], out.s, reason);
    out.s.push_back('[');
    for (size_t k = 0; k < matches.size(); ++k) {
      if (k) out.s.push_back(',');
      if (!embedded(matches[k], out.s, reason)) return false;
    }
    out.s.push_back(']');
    return true;
  }
  if (p.kind == ContentKind::ARRAY) {
    out.tag = ExtractedValue::LIST;
    out.items.resize(matches.size());
    for (size_t k = 0; k < matches.size(); ++k)
      if (!text_scalar(matches[k], p.item_kind, out.items[k], reason)) return false;
    return true;
  }
  return text_scalar(matches[0], p.kind, out, reason);
}

}  // namespace

std::string_view first_code_points(std::string_view s, size_t n) {
  size_t i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (n == 0) break;
      --n;
    }
  }
  return s.substr(0, i);
}

// unicode_repr: the quote it picks, backslash escapes, and non-printable characters as \x, \u, \U.
std::string py_str_repr(std::string_view s) {
  bool single = s.find('\'') != std::string_view::npos, dbl = s.find('"') != std::string_view::npos;
  char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  static const char hex[] = "0123456789abcdef";
  auto escape = [&](char kind, uint32_t c, int digits) {
    out.push_back('\\');
    out.push_back(kind);
    for (int k = digits - 1; k >= 0; --k) out.push_back(hex[(c >> (4 * k)) & 15]);
  };
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    size_t len = std::min(one_char_len(b), s.size() - i);
    uint32_t c = len == 1 ? b : b & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c < ' ' || c == 0x7F) {
      escape('x', c, 2);
    } else if (c < 0x7F || printable(c)) {
      out.append(s.substr(i, len));
    } else if (c <= 0xFF) {
      escape('x', c, 2);
    } else if (c <= 0xFFFF) {
      escape('u', c, 4);
    } else {
      escape('U', c, 8);
    }
    i += len;
  }
  out.push_back(quote);
  return out;
}

TextExtractor::TextExtractor(std::vector<ContentPropertySpec> properties) : properties_(std::move(properties)) {
  RE2::Options options;  // what pyarrow (MakeRE2Options) and google-re2 (Options()) give: UTF-8, the defaults
  options.set_log_errors(false);
  for (const ContentPropertySpec& p : properties_) {
    patterns_.emplace_back();
    if (!error_.empty() || !p.has_extract) continue;
    const char* refusal = nullptr;
    if (p.mode == ExtractMode::COUNT && p.kind != ContentKind::INTEGER)
      refusal = "count needs kind integer";
    else if (p.mode == ExtractMode::ALL && p.kind != ContentKind::ARRAY && p.kind != ContentKind::JSON)
      refusal = "all needs kind array or json";
    else if (p.mode != ExtractMode::ALL && p.kind == ContentKind::ARRAY)
      refusal = "an array needs mode all";
    else if (p.kind == ContentKind::ARRAY &&
             (p.item_kind == ContentKind::ARRAY || p.item_kind == ContentKind::JSON))
      refusal = "an array's items are string, integer, number or boolean";
    if (refusal) {
      error_ = "property '" + p.name + "': " + refusal;
      continue;
    }
    auto re = std::make_unique<RE2>(p.pattern, options);
    if (!re->ok()) {
      error_ = "property '" + p.name + "': not an RE2 pattern (" + re->error() + ")";
      continue;
    }
    patterns_.back() = std::move(re);
  }
}

TextExtractor::~TextExtractor() = default;

bool TextExtractor::extract(std::string_view text, std::vector<ExtractedValue>& values,
                            std::string& content_error) const {
  values.assign(properties_.size(), ExtractedValue());
  content_error.clear();
  if (!text.data()) text = std::string_view("", 0);  // match offsets are taken from text.data()
  bool failed = false;
  std::vector<std::string_view> matches;
  std::string reason;
  for (size_t k = 0; k < properties_.size(); ++k) {
    const ContentPropertySpec& p = properties_[k];
    const RE2* re = patterns_[k].get();
    if (!re) continue;
    ExtractedValue& out = values[k];
    matches.clear();
    switch (p.mode) {
      case ExtractMode::COUNT:
        out.tag = ExtractedValue::INT;
        out.i = count_matches(*re, text);
        continue;
      case ExtractMode::FIRST: {
        if (p.kind == ContentKind::BOOLEAN) {  // match_substring_regex: whether it matches
          out.tag = ExtractedValue::BOOL;
          out.b = RE2::PartialMatch(StringPiece(text.data(), text.size()), *re);
          continue;
        }
        std::string_view found;
        if (!first_match(*re, text, found)) continue;
        matches.push_back(found);
        break;
      }
      case ExtractMode::LAST: {
        bool any = false;
        std::string_view last;
        each_match(*re, text, [&](std::string_view m) {
          last = m;
          any = true;
        });
        if (!any) continue;
        matches.push_back(last);
        break;
      }
      case ExtractMode::ALL:
        each_match(*re, text, [&](std::string_view m) { matches.push_back(m); });
        break;
    }
    if (!convert(p, matches, out, reason)) {
      out = ExtractedValue();
      if (!failed) content_error = "property '" + p.name + "': " + reason;
      failed = true;
    }
  }
  return failed;
}

}  // namespace dspark
