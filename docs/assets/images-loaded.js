// Marks which images of a page really loaded (decoded, with a size), so a headless
// browser test can tell a shown picture from a broken one: <body data-images-loaded="a.svg b.svg">.
window.addEventListener("load", function () {
  var ok = [];
  document.querySelectorAll("img").forEach(function (img) {
    if (img.complete && img.naturalWidth > 0) {
      ok.push(img.getAttribute("src"));
    }
  });
  document.body.setAttribute("data-images-loaded", ok.join(" "));
  document.body.setAttribute("data-images-total", String(document.querySelectorAll("img").length));
});
