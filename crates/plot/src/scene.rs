//! The display list every chart is laid out into, and its two renderers:
//! SVG text and an RGB raster (then PNG).

use crate::font::{glyph, ADVANCE, GLYPH_H, GLYPH_W};
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
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#,
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

    /// Rasterize to RGB pixels (row-major, 3 bytes per pixel).
    pub fn rasterize(&self) -> Vec<u8> {
        let mut c = Canvas {
            w: self.width as i64,
            h: self.height as i64,
            px: vec![255; self.width as usize * self.height as usize * 3],
        };
        for item in &self.items {
            match item {
                Item::Line {
                    a,
                    b,
                    color,
                    width,
                    dashed,
                } => c.line(*a, *b, *color, *width, *dashed),
                Item::Polyline {
                    points,
                    color,
                    width,
                } => {
                    for pair in points.windows(2) {
                        c.line(pair[0], pair[1], *color, *width, false);
                    }
                }
                Item::Rect { x, y, w, h, fill } => c.rect(*x, *y, *w, *h, *fill),
                Item::Circle { c: center, r, fill } => c.circle(*center, *r, *fill),
                Item::Text {
                    at,
                    text,
                    size,
                    anchor,
                    color,
                    vertical,
                } => c.text(*at, text, *size, *anchor, *color, *vertical),
            }
        }
        c.px
    }
}

struct Canvas {
    w: i64,
    h: i64,
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x >= 0 && y >= 0 && x < self.w && y < self.h {
            let i = ((y * self.w + x) * 3) as usize;
            self.px[i] = c.0;
            self.px[i + 1] = c.1;
            self.px[i + 2] = c.2;
        }
    }

    fn dot(&mut self, x: i64, y: i64, c: Rgb, size: i64) {
        let lo = -(size - 1) / 2;
        for dy in lo..lo + size {
            for dx in lo..lo + size {
                self.set(x + dx, y + dy, c);
            }
        }
    }

    fn line(&mut self, a: (f64, f64), b: (f64, f64), c: Rgb, width: f64, dashed: bool) {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let steps = dx.abs().max(dy.abs()).ceil().max(1.0) as i64;
        if steps > 100_000 {
            return; // far outside any chart: nothing sensible to draw
        }
        let size = width.round().max(1.0) as i64;
        for i in 0..=steps {
            if dashed && (i / 4) % 2 == 1 {
                continue;
            }
            let t = i as f64 / steps as f64;
            let x = (a.0 + dx * t).round() as i64;
            let y = (a.1 + dy * t).round() as i64;
            self.dot(x, y, c, size);
        }
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, c: Rgb) {
        let (x0, y0) = (x.round() as i64, y.round() as i64);
        let (x1, y1) = ((x + w).round() as i64, (y + h).round() as i64);
        for yy in y0.max(0)..y1.min(self.h) {
            for xx in x0.max(0)..x1.min(self.w) {
                self.set(xx, yy, c);
            }
        }
    }

    fn circle(&mut self, center: (f64, f64), r: f64, c: Rgb) {
        let ri = r.ceil() as i64;
        let (cx, cy) = (center.0.round() as i64, center.1.round() as i64);
        for dy in -ri..=ri {
            for dx in -ri..=ri {
                if ((dx * dx + dy * dy) as f64) <= r * r + 0.5 {
                    self.set(cx + dx, cy + dy, c);
                }
            }
        }
    }

    fn text(
        &mut self,
        at: (f64, f64),
        text: &str,
        size: f64,
        anchor: Anchor,
        c: Rgb,
        vertical: bool,
    ) {
        // Font pixels are `scale` screen pixels; a 7-row glyph plus spacing
        // approximates the SVG font size.
        let scale = ((size / 9.0).round() as i64).max(1);
        let n = text.chars().count() as i64;
        let len = n * ADVANCE as i64 * scale - scale;
        let shift = match anchor {
            Anchor::Start => 0,
            Anchor::Middle => len / 2,
            Anchor::End => len,
        };
        let (ax, ay) = (at.0.round() as i64, at.1.round() as i64);
        let top = -(GLYPH_H as i64) * scale;
        for (k, ch) in text.chars().enumerate() {
            let rows = glyph(ch);
            let x0 = k as i64 * ADVANCE as i64 * scale - shift;
            for (ry, row) in rows.iter().enumerate() {
                for rx in 0..GLYPH_W {
                    if row & (0x10 >> rx) == 0 {
                        continue;
                    }
                    for sy in 0..scale {
                        for sx in 0..scale {
                            // Position along the text (u) and across it (v).
                            let u = x0 + rx as i64 * scale + sx;
                            let v = top + ry as i64 * scale + sy;
                            if vertical {
                                self.set(ax + v, ay - u, c);
                            } else {
                                self.set(ax + u, ay + v, c);
                            }
                        }
                    }
                }
            }
        }
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

    #[test]
    fn raster_draws_lines_and_text() {
        let s = Scene {
            width: 50,
            height: 20,
            items: vec![
                Item::Line {
                    a: (0.0, 0.0),
                    b: (49.0, 0.0),
                    color: (255, 0, 0),
                    width: 1.0,
                    dashed: false,
                },
                Item::Text {
                    at: (2.0, 15.0),
                    text: "H".into(),
                    size: 9.0,
                    anchor: Anchor::Start,
                    color: (0, 0, 0),
                    vertical: false,
                },
            ],
        };
        let px = s.rasterize();
        assert_eq!(&px[0..3], &[255, 0, 0]);
        assert_eq!(&px[49 * 3..49 * 3 + 3], &[255, 0, 0]);
        // 'H' has its left column set on every row: x = 2, y = 8..15.
        for y in 8..15 {
            let i = (y * 50 + 2) * 3;
            assert_eq!(&px[i..i + 3], &[0, 0, 0], "row {y}");
        }
        // Between the legs of the H, the middle row only.
        let i = (9 * 50 + 4) * 3;
        assert_eq!(&px[i..i + 3], &[255, 255, 255]);
    }
}
