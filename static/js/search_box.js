// "/" focuses the header search box (docs/search.md), unless the person is already typing somewhere.
document.addEventListener("keydown", function (event) {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  var target = event.target;
  var typing = target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  var box = document.getElementById("search-box");
  if (typing || !box) return;
  event.preventDefault();
  box.focus();
  box.select();
});
