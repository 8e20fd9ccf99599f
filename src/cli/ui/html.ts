// The frame of every page (head, header with the store's label, the live counts) and the one
// escaping function everything printed in it goes through.

/** Escapes text for HTML element content and quoted attribute values. */
export function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

export function page(title: string, label: string, body: string, live = true): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${esc(title)} · idemkit ui</title>
<link rel="stylesheet" href="/ui.css">
${live ? '<script src="/ui.js" defer></script>' : ''}
</head>
<body>
<header><a class="brand" href="/">idemkit</a> <span class="store">${esc(label)}</span> <span class="ro">read-only</span></header>
${live ? countsBar() : ''}
<main>
${body}
</main>
</body>
</html>
`;
}

function countsBar(): string {
  const stat = (name: string, text: string) => `<span class="stat"><b data-stat="${name}">…</b> ${text}</span>`;
  return `<section class="counts" aria-label="live counts">${stat('inFlight', 'in flight')}${stat('abandoned', 'abandoned')}${stat('completed', 'completed')}${stat(
    'expired',
    'expired',
  )}${stat('bodyBytes', 'body bytes')}<span class="updated" data-stat="updated"></span></section>`;
}
