import { createKoaApp } from './apps/koa-app.js';
import { describeMatrix } from './matrix.js';

describeMatrix('koa', createKoaApp);
