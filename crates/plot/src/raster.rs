//! PNG output: the scene drawn by tiny-skia (anti-aliased paths, PNG
//! encoding) with its text set in DejaVu Sans, embedded in the binary from
//! the `dejavu` crate and read by `ab_glyph`, so text looks the same on
//! every machine and needs no installed fonts. Glyphs are filled as paths,
//! so rotated axis labels need nothing special.

use crate::scene::{Anchor, Item, Rgb, Scene};
use crate::{Error, ErrorKind};
use ab_glyph::{Font, FontRef, OutlineCurve};
use std::sync::OnceLock;
use tiny_skia::{
    Color, FillRule, LineCap, LineJoin, Paint, PathBuilder, Pixmap, Rect, Stroke, StrokeDash,
    Transform,
};

/// The family every chart's text is set in.
pub(crate) const FAMILY: &str = "DejaVu Sans";

/// The embedded font, parsed once per process.
fn font() -> Result<&'static FontRef<'static>, Error> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(dejavu::sans::regular()).ok())
        .as_ref()
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Render,
                format!("the embedded {FAMILY} is unreadable"),
            )
        })
}

fn paint(c: Rgb) -> Paint<'static> {
    let mut p = Paint::default();
    p.set_color_rgba8(c.0, c.1, c.2, 255);
    p.anti_alias = true;
    p
}

/// Draw `scene` and encode it as PNG.
pub(crate) fn png(scene: &Scene) -> Result<Vec<u8>, Error> {
    let render = |what: &str| {
        Error::new(
            ErrorKind::Render,
            format!("cannot {what} a {}x{} chart", scene.width, scene.height),
        )
    };
    let mut pm = Pixmap::new(scene.width, scene.height).ok_or_else(|| render("draw"))?;
    pm.fill(Color::WHITE);
    let id = Transform::identity();
    for item in &scene.items {
        match item {
            Item::Line {
                a,
                b,
                color,
                width,
                dashed,
            } => {
                let mut pb = PathBuilder::new();
                pb.move_to(a.0 as f32, a.1 as f32);
                pb.line_to(b.0 as f32, b.1 as f32);
                let stroke = Stroke {
                    width: *width as f32,
                    line_cap: LineCap::Butt,
                    dash: if *dashed {
                        StrokeDash::new(vec![4.0, 3.0], 0.0)
                    } else {
                        None
                    },
                    ..Stroke::default()
                };
                if let Some(path) = pb.finish() {
                    pm.stroke_path(&path, &paint(*color), &stroke, id, None);
                }
            }
            Item::Polyline {
                points,
                color,
                width,
            } => {
                let mut pb = PathBuilder::new();
                for (i, &(x, y)) in points.iter().enumerate() {
                    if i == 0 {
                        pb.move_to(x as f32, y as f32);
                    } else {
                        pb.line_to(x as f32, y as f32);
                    }
                }
                let stroke = Stroke {
                    width: *width as f32,
                    line_join: LineJoin::Round,
                    line_cap: LineCap::Round,
                    ..Stroke::default()
                };
                if let Some(path) = pb.finish() {
                    pm.stroke_path(&path, &paint(*color), &stroke, id, None);
                }
            }
            Item::Rect { x, y, w, h, fill } => {
                if let Some(r) = Rect::from_xywh(*x as f32, *y as f32, *w as f32, *h as f32) {
                    pm.fill_rect(r, &paint(*fill), id, None);
                }
            }
            Item::Circle { c, r, fill } => {
                if let Some(path) = PathBuilder::from_circle(c.0 as f32, c.1 as f32, *r as f32) {
                    pm.fill_path(&path, &paint(*fill), FillRule::Winding, id, None);
                }
            }
            Item::Text {
                at,
                text,
                size,
                anchor,
                color,
                vertical,
            } => draw_text(
                &mut pm,
                font()?,
                *at,
                text,
                *size,
                *anchor,
                *color,
                *vertical,
            ),
        }
    }
    pm.encode_png().map_err(|_| render("encode"))
}

/// Set `text` with its baseline at `at` (rotated by -90 degrees around `at`
/// when `vertical`), `size` pixels to the em as in SVG's `font-size`.
#[allow(clippy::too_many_arguments)]
fn draw_text(
    pm: &mut Pixmap,
    font: &FontRef<'_>,
    at: (f64, f64),
    text: &str,
    size: f64,
    anchor: Anchor,
    color: Rgb,
    vertical: bool,
) {
    let scale = size as f32 / font.units_per_em().unwrap_or(2048.0);
    // The outline of the whole string in font units, y up, pen from 0.
    let mut pb = PathBuilder::new();
    let mut pen = 0.0f32;
    let mut prev = None;
    for ch in text.chars() {
        let g = font.glyph_id(ch);
        if let Some(p) = prev {
            pen += font.kern_unscaled(p, g);
        }
        if let Some(outline) = font.outline(g) {
            let mut last = None;
            for curve in &outline.curves {
                let (start, end) = match curve {
                    OutlineCurve::Line(a, b) => (*a, *b),
                    OutlineCurve::Quad(a, _, b) => (*a, *b),
                    OutlineCurve::Cubic(a, _, _, b) => (*a, *b),
                };
                // A curve that does not start where the last one ended
                // begins a new contour.
                if last != Some(start) {
                    if last.is_some() {
                        pb.close();
                    }
                    pb.move_to(start.x + pen, start.y);
                }
                match curve {
                    OutlineCurve::Line(_, b) => pb.line_to(b.x + pen, b.y),
                    OutlineCurve::Quad(_, c, b) => pb.quad_to(c.x + pen, c.y, b.x + pen, b.y),
                    OutlineCurve::Cubic(_, c1, c2, b) => {
                        pb.cubic_to(c1.x + pen, c1.y, c2.x + pen, c2.y, b.x + pen, b.y)
                    }
                }
                last = Some(end);
            }
            if last.is_some() {
                pb.close();
            }
        }
        pen += font.h_advance_unscaled(g);
        prev = Some(g);
    }
    let Some(path) = pb.finish() else {
        return; // only spaces, or nothing
    };
    let width = pen * scale;
    let shift = match anchor {
        Anchor::Start => 0.0,
        Anchor::Middle => width / 2.0,
        Anchor::End => width,
    };
    let (x, y) = (at.0 as f32, at.1 as f32);
    let mut t = Transform::from_translate(x - shift, y).pre_scale(scale, -scale);
    if vertical {
        t = Transform::from_rotate_at(-90.0, x, y).pre_concat(t);
    }
    pm.fill_path(&path, &paint(color), FillRule::Winding, t, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dark(pm: &Pixmap, x0: u32, y0: u32, x1: u32, y1: u32) -> usize {
        let mut n = 0;
        for y in y0..y1 {
            for x in x0..x1 {
                if pm.pixel(x, y).is_some_and(|p| p.red() < 128) {
                    n += 1;
                }
            }
        }
        n
    }

    fn text_scene(vertical: bool) -> Scene {
        Scene {
            width: 120,
            height: 120,
            items: vec![Item::Text {
                at: (60.0, 60.0),
                text: "1.5 µs".into(),
                size: 20.0,
                anchor: Anchor::Start,
                color: (0, 0, 0),
                vertical,
            }],
        }
    }

    #[test]
    fn text_is_set_in_the_embedded_font_right_of_and_above_its_anchor() {
        let pm = Pixmap::decode_png(&png(&text_scene(false)).unwrap()).unwrap();
        assert_eq!((pm.width(), pm.height()), (120, 120));
        // Glyphs sit above the baseline and right of the start anchor.
        let above_right = dark(&pm, 60, 40, 120, 60);
        assert!(above_right > 60, "only {above_right} dark pixels");
        assert_eq!(dark(&pm, 0, 0, 58, 120), 0);
        // Only the µ descends below the baseline, and not far.
        assert_eq!(dark(&pm, 0, 68, 120, 120), 0);
    }

    #[test]
    fn vertical_text_reads_upwards_from_its_anchor() {
        let pm = Pixmap::decode_png(&png(&text_scene(true)).unwrap()).unwrap();
        // Rotated by -90 degrees: the text runs up from (60, 60), left of x = 60.
        let up_left = dark(&pm, 40, 0, 60, 60);
        assert!(up_left > 60, "only {up_left} dark pixels");
        assert_eq!(dark(&pm, 0, 62, 120, 120), 0);
    }

    #[test]
    fn anchors_shift_text_by_its_width() {
        let mut s = text_scene(false);
        if let Item::Text { anchor, .. } = &mut s.items[0] {
            *anchor = Anchor::End;
        }
        let pm = Pixmap::decode_png(&png(&s).unwrap()).unwrap();
        assert!(dark(&pm, 0, 40, 60, 60) > 60);
        assert_eq!(dark(&pm, 62, 0, 120, 120), 0);
    }

    #[test]
    fn shapes_are_drawn_in_their_colours() {
        let s = Scene {
            width: 40,
            height: 40,
            items: vec![
                Item::Rect {
                    x: 0.0,
                    y: 0.0,
                    w: 10.0,
                    h: 10.0,
                    fill: (255, 0, 0),
                },
                Item::Circle {
                    c: (30.0, 30.0),
                    r: 5.0,
                    fill: (0, 0, 255),
                },
                Item::Line {
                    a: (0.0, 20.5),
                    b: (40.0, 20.5),
                    color: (0, 128, 0),
                    width: 1.0,
                    dashed: false,
                },
            ],
        };
        let pm = Pixmap::decode_png(&png(&s).unwrap()).unwrap();
        let px = |x, y| {
            let p = pm.pixel(x, y).unwrap();
            (p.red(), p.green(), p.blue())
        };
        assert_eq!(px(5, 5), (255, 0, 0));
        assert_eq!(px(30, 30), (0, 0, 255));
        assert_eq!(px(20, 20), (0, 128, 0));
        assert_eq!(px(20, 10), (255, 255, 255));
    }
}
