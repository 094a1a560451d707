document.addEventListener("keydown", () => {});
