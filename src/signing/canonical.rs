//! The canonical byte form of a JSON value, the bytes a record's signature covers.
//!
//! - Objects: members sorted by key, compared as UTF-8 bytes; no whitespace anywhere.
//! - Strings: UTF-8 as they are, except `"` and `\` (escaped with `\`), and the control
//!   characters below U+0020: `\b`, `\t`, `\n`, `\f`, `\r`, the rest as `\u00xx` (lowercase
//!   hex). Nothing else is escaped.
//! - Integers (numbers held as an i64 or u64): their decimal digits.
//! - Other numbers: ECMAScript's Number-to-String form (as in RFC 8785): the shortest
//!   digits that read back as the same double, in plain notation when the decimal
//!   exponent n (value = 0.d₁d₂… × 10ⁿ) satisfies −6 < n ≤ 21 (`900`, `0.5`,
//!   `0.000015`), otherwise `d.ddde±x` (`1e+21`, `1.5e-7`); `-0` is `0`.
//!
//! The number rule is written out here on purpose rather than taken from serde_json's
//! printer: that printer changed between serde_json releases (`1e16` became `1e+16`), and
//! a record signed by one build must verify with another and with the Python client
//! (`clients/python/kaas_client/signing.py`, which implements the same rules).

use serde_json::Value;

/// The canonical text of `value` (see the module documentation).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                // serde_json (without arbitrary_precision) holds every other number as a
                // finite f64.
                out.push_str(&ecmascript_number(n.as_f64().unwrap_or(0.0)));
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted here: the map's own order depends on serde_json's `preserve_order`.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A finite double in ECMAScript's Number-to-String form.
pub fn ecmascript_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        // JSON has no NaN or infinity; serde_json never holds them in a Value.
        return "0".into();
    }
    // Rust's `{:e}` prints the shortest digits that round-trip: `d[.ddd]e[-]x`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let k = digits.len() as i64;
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    let sign = if x < 0.0 { "-" } else { "" };
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e_sign = if e < 0 { '-' } else { '+' };
        let rest = if k > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        format!("{}{rest}e{e_sign}{}", &digits[..1], e.abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_follow_ecmascript() {
        let cases: [(f64, &str); 16] = [
            (900.0, "900"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1.5e-5, "0.000015"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1e16, "10000000000000000"),
            (1e21, "1e+21"),
            (1.2345e22, "1.2345e+22"),
            (123456789012345680000.0, "123456789012345680000"),
            (-0.0, "0"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (1234.5678, "1234.5678"),
        ];
        for (x, want) in cases {
            assert_eq!(ecmascript_number(x), want, "{x:e}");
        }
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2.0, "x"], "x": null}, "c": true}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"c":true,"a":{"x":null,"y":[1,2.0,"x"]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":null,"y":[1,2,"x"]},"b":1,"c":true}"#);
    }

    #[test]
    fn strings_escape_only_quotes_backslashes_and_controls() {
        let v = json!({"s": "a\"b\\c\n\t\u{1}\u{7f}é→😀/"});
        assert_eq!(canonical_json(&v), "{\"s\":\"a\\\"b\\\\c\\n\\t\\u0001\u{7f}é→😀/\"}");
    }

    #[test]
    fn integers_keep_every_digit() {
        let v = json!([u64::MAX, i64::MIN, 0, -1]);
        assert_eq!(canonical_json(&v), format!("[{},{},0,-1]", u64::MAX, i64::MIN));
    }
}
