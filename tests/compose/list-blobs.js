// Lists the blobs of a container on the Azurite this runs beside, one name a line, with
// Shared Key signing on node's standard library (run inside the Azurite container, which
// has node and nothing else of use). Independent of the server's own blob client.
//
//   node - CONNECTION_STRING CONTAINER < list-blobs.js
"use strict";
const http = require("http");
const crypto = require("crypto");

const [cs, container] = process.argv.slice(2);
const parts = {};
for (const p of cs.split(";")) {
  const i = p.indexOf("=");
  if (i > 0) parts[p.slice(0, i)] = p.slice(i + 1);
}
const account = parts.AccountName;
const key = Buffer.from(parts.AccountKey, "base64");
const port = Number(new URL(parts.BlobEndpoint).port || 10000);

function list(marker) {
  const query = { comp: "list", restype: "container" };
  if (marker) query.marker = marker;
  const date = new Date().toUTCString();
  const version = "2021-08-06";
  let resource = `/${account}/${account}/${container}`;
  for (const k of Object.keys(query).sort()) resource += `\n${k}:${query[k]}`;
  const toSign = ["GET", "", "", "", "", "", "", "", "", "", "", "",
                  `x-ms-date:${date}`, `x-ms-version:${version}`, resource].join("\n");
  const sig = crypto.createHmac("sha256", key).update(toSign, "utf8").digest("base64");
  const path = `/${account}/${container}?` + new URLSearchParams(query).toString();
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path, headers: {
      "x-ms-date": date, "x-ms-version": version,
      Authorization: `SharedKey ${account}:${sig}`,
    } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { body += c; });
      res.on("end", () => res.statusCode === 200 ? resolve(body)
        : reject(new Error(`list: HTTP ${res.statusCode}: ${body.slice(0, 300)}`)));
    });
    req.on("error", reject);
  });
}

(async () => {
  let marker = "";
  do {
    const body = await list(marker);
    for (const m of body.matchAll(/<Name>(.*?)<\/Name>/g)) console.log(m[1]);
    const next = /<NextMarker>(.+?)<\/NextMarker>/.exec(body);
    marker = next ? next[1] : "";
  } while (marker);
})().catch((e) => { console.error(e.message); process.exit(1); });
