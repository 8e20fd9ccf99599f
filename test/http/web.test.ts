import { createWebApp } from './apps/web-app.js';
import { describeMatrix } from './matrix.js';

describeMatrix('web', createWebApp);
