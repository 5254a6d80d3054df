//! The display list every chart is laid out into, and its SVG writer. The
//! PNG is rendered from that SVG (see `raster.rs`), so both images agree.

use std::fmt::Write;

/// An RGB colour.
pub type Rgb = (u8, u8, u8);

/// Horizontal anchoring of a text item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// One drawing primitive, in pixels, y growing downwards.
#[derive(Debug, Clone)]
pub enum Item {
    Line {
        a: (f64, f64),
        b: (f64, f64),
        color: Rgb,
        width: f64,
        dashed: bool,
    },
    Polyline {
        points: Vec<(f64, f64)>,
        color: Rgb,
        width: f64,
    },
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: Rgb,
    },
    Circle {
        c: (f64, f64),
        r: f64,
        fill: Rgb,
    },
    /// Text whose baseline-ish bottom is at `at.1`; `vertical` rotates it by
    /// -90 degrees around `at`.
    Text {
        at: (f64, f64),
        text: String,
        size: f64,
        anchor: Anchor,
        color: Rgb,
        vertical: bool,
    },
}

/// A laid-out chart.
#[derive(Debug, Clone)]
pub struct Scene {
    pub width: u32,
    pub height: u32,
    pub items: Vec<Item>,
}

fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

impl Scene {
    /// Render as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="'DejaVu Sans', sans-serif">"#,
            w = self.width,
            h = self.height
        );
        let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
        for item in &self.items {
            match item {
                Item::Line {
                    a,
                    b,
                    color,
                    width,
                    dashed,
                } => {
                    let dash = if *dashed {
                        r#" stroke-dasharray="4 3""#
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        s,
                        r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="{}"{}/>"#,
                        a.0,
                        a.1,
                        b.0,
                        b.1,
                        hex(*color),
                        width,
                        dash
                    );
                }
                Item::Polyline {
                    points,
                    color,
                    width,
                } => {
                    let pts: Vec<String> = points
                        .iter()
                        .map(|(x, y)| format!("{x:.1},{y:.1}"))
                        .collect();
                    let _ = writeln!(
                        s,
                        r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"/>"#,
                        pts.join(" "),
                        hex(*color),
                        width
                    );
                }
                Item::Rect { x, y, w, h, fill } => {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"/>"#,
                        hex(*fill)
                    );
                }
                Item::Circle { c, r, fill } => {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{}"/>"#,
                        c.0,
                        c.1,
                        hex(*fill)
                    );
                }
                Item::Text {
                    at,
                    text,
                    size,
                    anchor,
                    color,
                    vertical,
                } => {
                    let anchor = match anchor {
                        Anchor::Start => "start",
                        Anchor::Middle => "middle",
                        Anchor::End => "end",
                    };
                    let rot = if *vertical {
                        format!(r#" transform="rotate(-90 {:.1} {:.1})""#, at.0, at.1)
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="{size}" text-anchor="{anchor}" fill="{}"{rot}>{}</text>"#,
                        at.0,
                        at.1,
                        hex(*color),
                        escape(text)
                    );
                }
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_escapes_text() {
        let s = Scene {
            width: 10,
            height: 10,
            items: vec![Item::Text {
                at: (1.0, 1.0),
                text: "a<b & \"c\"".into(),
                size: 12.0,
                anchor: Anchor::Start,
                color: (0, 0, 0),
                vertical: false,
            }],
        };
        let svg = s.to_svg();
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(!svg.contains("a<b"));
    }
}
