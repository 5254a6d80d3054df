//! PNG output: the chart's own SVG rendered by resvg (tiny-skia underneath)
//! with DejaVu Sans embedded in the binary, so text is drawn the same on
//! every machine and needs no installed fonts.

use crate::{Error, ErrorKind};
use resvg::{tiny_skia, usvg};
use std::sync::{Arc, OnceLock};

/// The family every chart's text is set in (embedded from the `dejavu` crate).
pub(crate) const FAMILY: &str = "DejaVu Sans";

/// The font database: DejaVu Sans only, loaded once per process.
fn fonts() -> Arc<usvg::fontdb::Database> {
    static DB: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_font_source(usvg::fontdb::Source::Binary(Arc::new(
            dejavu::sans::regular(),
        )));
        db.set_sans_serif_family(FAMILY);
        Arc::new(db)
    })
    .clone()
}

/// Render an SVG document (such as a chart's `to_svg`) to PNG bytes at its
/// own pixel size, on a white background if it draws one.
pub fn png_from_svg(svg: &str) -> Result<Vec<u8>, Error> {
    let opt = usvg::Options {
        fontdb: fonts(),
        font_family: FAMILY.to_string(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt)
        .map_err(|e| Error::new(ErrorKind::Render, format!("cannot read the SVG: {e}")))?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        Error::new(
            ErrorKind::Render,
            format!("cannot draw a {}x{} image", size.width(), size.height()),
        )
    })?;
    resvg::render(
        &tree,
        tiny_skia::Transform::identity(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| Error::new(ErrorKind::Render, format!("cannot encode the PNG: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_with_the_embedded_font() {
        let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" font-family="sans-serif">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="10" y="28" font-size="20" fill="#000000">1.5 µs</text>
</svg>"##;
        let png = png_from_svg(svg).unwrap();
        let px = tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!((px.width(), px.height()), (120, 40));
        // Glyphs leave dark pixels (no font would leave the image white).
        let dark = px.pixels().iter().filter(|p| p.red() < 100).count();
        assert!(dark > 50, "only {dark} dark pixels: text not drawn");
    }

    #[test]
    fn bad_svg_is_an_error() {
        let e = png_from_svg("<svg").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Render);
    }
}
